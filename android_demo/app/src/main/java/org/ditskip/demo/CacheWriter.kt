package org.ditskip.demo

import java.io.File
import java.io.FileOutputStream
import java.io.RandomAccessFile
import java.nio.file.Files
import java.nio.file.StandardCopyOption
import java.security.MessageDigest

/** One part's place inside an entry (the index's `layout`): dtype, shape, byte offset (64-byte aligned), bytes. */
class LayoutPart(val dtype: String, val shape: IntArray, val offset: Int, val bytes: Int)

/**
 * The device's residual cache writer, the twin of ditskip_edge/runtime/cache.py `CacheWriter` (same shard bytes, same
 * index and journal JSON, byte for byte: PyJson): entries already encoded (CodecEncoder) are appended to
 * shard_NNNNN.bin (written as .tmp, renamed when closed at about `shardBytes`), and `finish` writes
 * cache_index.json (temp file + fsync + rename).
 *
 * Resumable (`resumable = true`, the subject stage): every entry is fsync'ed and journalled (cache_journal.jsonl: a
 * header line with the identity digest, codec, shapes, shard size and the run's identity, then one line per entry
 * and per closed shard). A writer opened on a folder holding a journal continues it: the header must be this one's
 * (else refused), the open shard is cut back to its last journalled entry, and [nextIndex] says which entry comes
 * next, so no journalled entry is computed again. Unlike cache.py, a line torn by a kill is cut off the journal
 * before appending (cache.py appends after it, losing the appended lines at a second resume; the cache is the same).
 */
class CacheWriter(val dir: File, val identity: Map<String, Any?>, val codec: CacheCodec,
                  val shapes: LinkedHashMap<String, IntArray>, val shardBytes: Long = DEFAULT_SHARD_BYTES,
                  val resumable: Boolean = false, val run: String = "") {
    val layout = LinkedHashMap<String, LayoutPart>()
    val entrySize: Int
    val entries = ArrayList<Map<String, Any?>>()
    val extras = ArrayList<Map<String, Any?>>()          // the caller's per-entry fields (journalled)
    val shards = LinkedHashMap<String, Map<String, Any?>>()
    var resumedEntries = 0
        private set
    private var file: RandomAccessFile? = null
    private var name = ""
    private var hash = MessageDigest.getInstance("SHA-256")
    private var pos = 0L
    private var journal: FileOutputStream? = null

    init {
        dir.mkdirs()
        var off = 0
        for ((part, spec) in codec.parts(shapes)) {
            val n = dtypeBytes(spec.first) * spec.second.fold(1) { a, b -> a * b }
            layout[part] = LayoutPart(spec.first, spec.second, off, n)
            off = (off + n + ALIGN - 1) / ALIGN * ALIGN
        }
        entrySize = off
        if (resumable) resumeOrStart()
    }

    val nextIndex: Int get() = entries.size

    private fun shapesJson(): Map<String, Any?> = LinkedHashMap<String, Any?>().apply {
        for ((k, v) in shapes) put(k, v.map { it.toLong() })
    }

    private fun header(): Map<String, Any?> = linkedMapOf("identity_sha256" to identityDigest(identity),
        "codec" to codec.spec, "shapes" to shapesJson(), "shard_bytes" to shardBytes, "run" to run)

    private fun journalAppend(record: Map<String, Any?>) {
        val j = journal!!
        j.write((PyJson.dumps(record, compact = true) + "\n").toByteArray(Charsets.UTF_8))
        j.flush()
        j.fd.sync()
    }

    private fun resumeOrStart() {
        val path = File(dir, JOURNAL)
        val lines = ArrayList<Map<String, Any?>>()
        var goodBytes = 0L
        if (path.isFile) {
            for (raw in path.readText().split("\n")) {
                @Suppress("UNCHECKED_CAST")
                val rec = try { PyJson.parse(raw) as? Map<String, Any?> } catch (e: RuntimeException) { null } ?: break
                lines.add(rec)
                goodBytes += raw.toByteArray(Charsets.UTF_8).size + 1
            }
        }
        if (lines.isEmpty()) {
            dir.listFiles()?.filter { it.name.startsWith("shard_") }?.forEach { it.delete() }
            journal = FileOutputStream(path, false)
            journalAppend(mapOf("header" to header()))
            return
        }
        require(lines[0]["header"] == header()) {
            "$path: an interrupted residual cache for other inputs (model bundle, photos, prompt, codec or schedule " +
                "differ): delete ${dir.parentFile?.parentFile} or start over"
        }
        for (rec in lines.drop(1)) {
            @Suppress("UNCHECKED_CAST")
            if ("entry" in rec) {
                entries.add(rec["entry"] as Map<String, Any?>)
                extras.add((rec["extra"] as? Map<String, Any?>) ?: emptyMap())
            } else if ("shard" in rec) {
                shards[rec["shard"] as String] = linkedMapOf("bytes" to rec["bytes"], "sha256" to rec["sha256"])
            }
        }
        // the shard still open when the run stopped: cut it back to its last journalled entry and reopen it
        val open = entries.filter { it["shard"] !in shards }
        if (open.isNotEmpty()) {
            name = open[0]["shard"] as String
            val tmp = File(dir, "$name.tmp"); val fin = File(dir, name)
            if (!tmp.isFile && fin.isFile) Files.move(fin.toPath(), tmp.toPath(), StandardCopyOption.REPLACE_EXISTING)
            val end = (open.last()["offset"] as Long) + (open.last()["bytes"] as Long)
            require(tmp.isFile && tmp.length() >= end) {
                "$tmp: shorter than its journal says ($end bytes): the cache in progress is damaged; delete " +
                    "${dir.parentFile?.parentFile} or start over"
            }
            val f = RandomAccessFile(tmp, "rw")
            f.setLength(end)
            hash = MessageDigest.getInstance("SHA-256")
            val buf = ByteArray(1 shl 20)
            var done = 0L
            f.seek(0)
            while (done < end) {
                val k = f.read(buf, 0, minOf(buf.size.toLong(), end - done).toInt())
                hash.update(buf, 0, k)
                done += k
            }
            f.seek(end)
            pos = end
            file = f
        }
        dir.listFiles()?.filter { it.name.startsWith("shard_") }?.forEach { stale ->   // begun after the last entry
            val n = stale.name.removeSuffix(".tmp")
            if (n !in shards && n != (if (open.isNotEmpty()) name else "")) stale.delete()
        }
        resumedEntries = entries.size
        val complete = goodBytes <= path.length()             // false: the last good line lost only its newline
        RandomAccessFile(path, "rw").use { it.setLength(minOf(goodBytes, path.length())) }   // a torn last line goes
        journal = FileOutputStream(path, true)
        if (!complete) journal!!.write("\n".toByteArray())
    }

    /** Append entry `index` (parts as CodecEncoder gives them; exactly the layout's parts, dtypes and shapes). */
    fun add(index: Int, parts: Map<String, EncodedPart>, extra: Map<String, Any?>? = null) {
        require(index == entries.size) { "cache entries must be added in order: got $index, expected ${entries.size}" }
        require(parts.keys == layout.keys) { "cache entry $index: parts ${parts.keys.sorted()} differ from the layout ${layout.keys.sorted()}" }
        val buf = ByteArray(entrySize)
        for ((p, info) in layout) {
            val part = parts.getValue(p)
            require(part.dtype == info.dtype && part.shape.contentEquals(info.shape) && part.bytes.size == info.bytes) {
                "cache entry $index: part $p is ${part.dtype} ${part.shape.toList()}, layout ${info.dtype} ${info.shape.toList()}"
            }
            System.arraycopy(part.bytes, 0, buf, info.offset, info.bytes)
        }
        if (file == null || (pos + entrySize > shardBytes && pos > 0)) {
            closeShard()
            openShard()
        }
        val f = file!!
        f.write(buf)
        hash.update(buf)
        val entry = linkedMapOf<String, Any?>("shard" to name, "offset" to pos, "bytes" to entrySize.toLong(),
                                              "sha256" to hex(MessageDigest.getInstance("SHA-256").digest(buf)))
        entries.add(entry)
        extras.add(extra ?: emptyMap())
        pos += entrySize
        if (journal != null) {
            f.fd.sync()
            journalAppend(linkedMapOf("entry" to entry, "extra" to (extra ?: emptyMap<String, Any?>())))
        }
    }

    private fun openShard() {
        name = String.format("shard_%05d.bin", shards.size)
        val f = RandomAccessFile(File(dir, "$name.tmp"), "rw")
        f.setLength(0)
        file = f
        hash = MessageDigest.getInstance("SHA-256")
        pos = 0
    }

    private fun closeShard() {
        val f = file ?: return
        f.fd.sync()
        f.close()
        Files.move(File(dir, "$name.tmp").toPath(), File(dir, name).toPath(), StandardCopyOption.REPLACE_EXISTING,
                   StandardCopyOption.ATOMIC_MOVE)
        shards[name] = linkedMapOf("bytes" to pos, "sha256" to hex(hash.digest()))
        file = null
        if (journal != null) journalAppend(linkedMapOf<String, Any?>("shard" to name).apply { putAll(shards.getValue(name)) })
    }

    /** Close the last shard and write the index (with `extra` fields, e.g. the coding error); the journal goes. */
    fun finish(extra: Map<String, Any?>? = null): Map<String, Any?> {
        closeShard()
        val layoutJson = LinkedHashMap<String, Any?>()
        for ((p, l) in layout) layoutJson[p] = linkedMapOf("dtype" to l.dtype, "shape" to l.shape.map { it.toLong() },
                                                         "offset" to l.offset.toLong(), "bytes" to l.bytes.toLong())
        val index = linkedMapOf<String, Any?>("format" to BundleContract.CACHE_FORMAT,
            "format_version" to BundleContract.CACHE_FORMAT_VERSION.toLong(), "identity" to identity,
            "identity_sha256" to identityDigest(identity), "codec" to mapOf("spec" to codec.spec), "shapes" to shapesJson())
        if (extra != null) index.putAll(extra)
        index["layout"] = layoutJson
        index["entry_bytes"] = entrySize.toLong()
        index["num_entries"] = entries.size.toLong()
        index["shards"] = shards
        index["entries"] = entries
        atomicWriteText(File(dir, BundleContract.CACHE_INDEX_FILE), PyJson.dumps(index, indent = 1))
        journal?.close()
        journal = null
        File(dir, JOURNAL).delete()
        return index
    }

    /** Stop without finishing (a resumable writer's journal and open shard stay). */
    fun close() {
        file?.close(); journal?.close()
        file = null; journal = null
    }

    companion object {
        const val DEFAULT_SHARD_BYTES = 64L shl 20
        const val JOURNAL = "cache_journal.jsonl"
        const val ALIGN = 64

        fun dtypeBytes(dtype: String): Int {
            val k = BundleContract.CACHE_PART_DTYPES.indexOf(dtype)
            require(k >= 0) { "cache part dtype $dtype is not one of ${BundleContract.CACHE_PART_DTYPES}" }
            return BundleContract.CACHE_PART_DTYPE_BYTES[k]
        }

        /** SHA-256 of json.dumps(identity, sort_keys=True) (cache_format.py identity_digest). */
        fun identityDigest(identity: Map<String, Any?>): String =
            hex(MessageDigest.getInstance("SHA-256").digest(PyJson.dumps(identity, sortKeys = true).toByteArray(Charsets.UTF_8)))

        fun hex(b: ByteArray): String = b.joinToString("") { "%02x".format(it) }

        fun atomicWriteText(path: File, text: String) {
            val tmp = File(path.parentFile, path.name + ".tmp")
            FileOutputStream(tmp).use { it.write(text.toByteArray(Charsets.UTF_8)); it.flush(); it.fd.sync() }
            Files.move(tmp.toPath(), path.toPath(), StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE)
        }
    }
}
