package org.ditskip.demo

import org.json.JSONObject
import java.io.File
import java.nio.ByteOrder
import java.nio.channels.FileChannel
import java.security.MessageDigest

/** One stored part of a cache entry as the index's `layout` gives it (contract `cache.layout_fields`). */
data class CachePart(val dtype: String, val shape: LongArray, val offset: Int, val bytes: Int)

/** One sample's place in the shards (contract `cache.entry_fields`). */
data class CacheEntry(val shard: String, val offset: Long, val bytes: Long, val sha256: String)

/**
 * The sharded residual cache (contract v3, `cache` section; ditskip_edge/runtime/cache.py): cache_index.json plus
 * shard_NNNNN.bin files. Sample k is bytes [offset, offset + bytes) of its shard: only that slice is memory-mapped,
 * its SHA-256 is checked, and its parts are handed out as stored (int8 / uint8 codes and fp16 bytes, float32 scales
 * and x0: every dtype the ExecuTorch Java API can pass); the program decodes them itself.
 */
class ResidualCache(val dir: File) {
    val layout: Map<String, CachePart>
    val entryBytes: Long
    private val entries: List<CacheEntry>

    init {
        val indexFile = File(dir, BundleContract.CACHE_INDEX_FILE)
        require(indexFile.isFile) { "$indexFile: residual cache index missing" }
        val index = JSONObject(indexFile.readText())
        require(index.optString("format") == BundleContract.CACHE_FORMAT &&
                index.optInt("format_version") == BundleContract.CACHE_FORMAT_VERSION) {
            "$indexFile: format ${index.optString("format")} v${index.optInt("format_version")}, expected " +
                "${BundleContract.CACHE_FORMAT} v${BundleContract.CACHE_FORMAT_VERSION} (bundle compiled for another contract)"
        }
        entryBytes = index.getLong("entry_bytes")
        val lj = index.getJSONObject("layout")
        val parts = LinkedHashMap<String, CachePart>()
        for (name in lj.keys()) {
            val p = lj.getJSONObject(name)
            val dtype = p.getString("dtype")
            val k = BundleContract.CACHE_PART_DTYPES.indexOf(dtype)
            require(k >= 0) { "$indexFile: part $name has dtype $dtype, not one of ${BundleContract.CACHE_PART_DTYPES}" }
            val sj = p.getJSONArray("shape")
            val shape = LongArray(sj.length()) { sj.getLong(it) }
            val part = CachePart(dtype, shape, p.getInt("offset"), p.getInt("bytes"))
            require(part.bytes.toLong() == shape.fold(1L) { a, b -> a * b } * BundleContract.CACHE_PART_DTYPE_BYTES[k] &&
                    part.offset >= 0 && part.offset + part.bytes <= entryBytes) { "$indexFile: part $name does not fit its entry" }
            parts[name] = part
        }
        require(BundleContract.X0_KEY in parts) { "$indexFile: layout has no ${BundleContract.X0_KEY}" }
        layout = parts
        val shards = index.getJSONObject("shards")
        for (name in shards.keys()) {
            val f = File(dir, name)
            require(f.isFile) { "$f: residual cache shard missing" }
            val want = shards.getJSONObject(name).getLong("bytes")
            require(f.length() == want) { "$f: ${f.length()} bytes, ${BundleContract.CACHE_INDEX_FILE} says $want (truncated?)" }
        }
        val ej = index.getJSONArray("entries")
        entries = (0 until ej.length()).map { i ->
            val e = ej.getJSONObject(i)
            CacheEntry(e.getString("shard"), e.getLong("offset"), e.getLong("bytes"), e.getString("sha256"))
        }
        for ((i, e) in entries.withIndex()) {
            require(e.bytes == entryBytes && shards.optJSONObject(e.shard) != null &&
                    e.offset + e.bytes <= shards.getJSONObject(e.shard).getLong("bytes")) {
                "$indexFile: entry $i lies outside its shard ${e.shard}"
            }
        }
    }

    val size: Int get() = entries.size

    /** Sample k's stored parts {"x0", "<residual>.<part>", ...}, from a read-only mapping of its slice only. */
    fun read(k: Int): Map<String, RawTensor> {
        val e = entries[k]
        val slice = FileChannel.open(File(dir, e.shard).toPath()).use { ch ->
            ch.map(FileChannel.MapMode.READ_ONLY, e.offset, e.bytes)        // the mapping outlives the channel
        }.order(ByteOrder.LITTLE_ENDIAN)
        val md = MessageDigest.getInstance("SHA-256")
        md.update(slice.duplicate())
        val hex = md.digest().joinToString("") { "%02x".format(it) }
        require(hex == e.sha256) {
            "${File(dir, e.shard)}: entry $k (bytes ${e.offset}..${e.offset + e.bytes}) does not match its SHA-256 (corrupt)"
        }
        return layout.mapValues { (_, p) ->
            val view = slice.duplicate().apply { position(p.offset); limit(p.offset + p.bytes) }.slice()
                .order(ByteOrder.LITTLE_ENDIAN)
            RawTensor(SAFETENSORS_DTYPE.getValue(p.dtype), p.shape, view)
        }
    }

    companion object {
        /** Contract part dtype -> RawTensor's (safetensors) dtype code. */
        val SAFETENSORS_DTYPE = mapOf("float32" to "F32", "int8" to "I8", "uint8" to "U8")
    }
}
