package org.ditskip.demo

import org.json.JSONArray
import org.json.JSONObject
import java.io.File
import java.io.FileOutputStream
import java.nio.ByteBuffer
import java.nio.ByteOrder
import java.nio.channels.FileChannel

/** A tensor read from a safetensors file: little-endian raw bytes plus dtype ("F32", "I8", "U8", "F16") and shape. */
class RawTensor(val dtype: String, val shape: LongArray, val bytes: ByteBuffer) {
    val numel: Int get() = shape.fold(1L) { a, b -> a * b }.toInt()

    fun floats(): FloatArray {
        require(dtype == "F32") { "tensor is $dtype, expected F32" }
        val out = FloatArray(numel)
        bytes.duplicate().order(ByteOrder.LITTLE_ENDIAN).asFloatBuffer().get(out)
        return out
    }

    /** Row [i] of the first dimension, shape [1, ...] (a view of the same bytes: nothing copied). */
    fun row(i: Int): RawTensor {
        require(shape.isNotEmpty() && i in 0 until shape[0]) { "row $i of a tensor of shape ${shape.toList()}" }
        val rowBytes = bytes.remaining() / shape[0].toInt()
        val view = bytes.duplicate().apply { position(position() + i * rowBytes); limit(position() + rowBytes) }.slice()
        return RawTensor(dtype, longArrayOf(1L) + shape.copyOfRange(1, shape.size), view.order(ByteOrder.LITTLE_ENDIAN))
    }

    /** The stored bytes as they are (int8 / uint8 codes), one byte per element. */
    fun rawBytes(): ByteArray {
        require(dtype == "I8" || dtype == "U8") { "tensor is $dtype, expected I8 or U8" }
        val out = ByteArray(numel)
        bytes.duplicate().get(out)
        return out
    }
}

/** The safetensors format: u64 little-endian header length, JSON header, then the data (offsets in the header). */
object Safetensors {
    fun read(file: File): Map<String, RawTensor> {
        FileChannel.open(file.toPath()).use { ch ->
            val map = ch.map(FileChannel.MapMode.READ_ONLY, 0, ch.size()).order(ByteOrder.LITTLE_ENDIAN)
            val headerLen = map.getLong(0).toInt()
            val headerBytes = ByteArray(headerLen)
            map.position(8); map.get(headerBytes)
            val header = JSONObject(String(headerBytes, Charsets.UTF_8))
            val base = 8 + headerLen
            val out = LinkedHashMap<String, RawTensor>()
            for (key in header.keys()) {
                if (key == "__metadata__") continue
                val info = header.getJSONObject(key)
                val shapeJson = info.getJSONArray("shape")
                val shape = LongArray(shapeJson.length()) { shapeJson.getLong(it) }
                val offs = info.getJSONArray("data_offsets")
                val start = base + offs.getLong(0).toInt(); val end = base + offs.getLong(1).toInt()
                val slice = map.duplicate().apply { position(start); limit(end) }.slice().order(ByteOrder.LITTLE_ENDIAN)
                out[key] = RawTensor(info.getString("dtype"), shape, slice)
            }
            return out
        }
    }

    fun f32Bytes(values: FloatArray): ByteArray {
        val buf = ByteBuffer.allocate(values.size * 4).order(ByteOrder.LITTLE_ENDIAN)
        buf.asFloatBuffer().put(values)
        return buf.array()
    }

    /** The __metadata__ strings of a safetensors file (empty if none). */
    fun metadata(file: File): Map<String, String> {
        java.io.RandomAccessFile(file, "r").use { f ->
            val lenBytes = ByteArray(8); f.readFully(lenBytes)
            val len = ByteBuffer.wrap(lenBytes).order(ByteOrder.LITTLE_ENDIAN).long.toInt()
            val header = ByteArray(len); f.readFully(header)
            val meta = JSONObject(String(header, Charsets.UTF_8)).optJSONObject("__metadata__") ?: return emptyMap()
            return meta.keys().asSequence().associateWith { meta.getString(it) }
        }
    }

    /** Write tensors of any stored dtype (dtype, shape, little-endian bytes) atomically, widest dtypes first so
     *  every float32 tensor is 4-byte aligned (runtime/weights.py write_weights: the merged LoRA'd weights). */
    fun writeRaw(file: File, tensors: Map<String, Triple<String, LongArray, ByteArray>>, metadata: Map<String, String>) {
        val width = mapOf("F32" to 4, "I8" to 1, "U8" to 1)
        val keys = tensors.keys.sortedWith(compareBy({ -width.getValue(tensors.getValue(it).first) }, { it }))
        val header = JSONObject()
        header.put("__metadata__", JSONObject(metadata))
        var offset = 0L
        for (k in keys) {
            val (dtype, shape, data) = tensors.getValue(k)
            header.put(k, JSONObject().put("dtype", dtype).put("shape", JSONArray(shape.toList()))
                .put("data_offsets", JSONArray(listOf(offset, offset + data.size))))
            offset += data.size
        }
        var headerBytes = header.toString().toByteArray(Charsets.UTF_8)
        headerBytes += ByteArray((8 - headerBytes.size % 8) % 8) { 0x20.toByte() }
        file.parentFile?.mkdirs()
        val tmp = File(file.parentFile, file.name + ".tmp")
        FileOutputStream(tmp).use { out ->
            out.write(ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN).putLong(headerBytes.size.toLong()).array())
            out.write(headerBytes)
            for (k in keys) out.write(tensors.getValue(k).third)
            out.fd.sync()
        }
        check(tmp.renameTo(file)) { "could not rename $tmp to $file" }
    }

    /** Write float32 tensors (sorted keys, as the Python writer does) atomically: tmp file, fsync, rename. */
    fun writeF32(file: File, tensors: Map<String, Pair<LongArray, FloatArray>>, metadata: Map<String, String>) {
        val header = JSONObject()
        if (metadata.isNotEmpty()) header.put("__metadata__", JSONObject(metadata))
        var offset = 0L
        val keys = tensors.keys.sorted()
        for (k in keys) {
            val (shape, data) = tensors.getValue(k)
            val n = data.size * 4L
            header.put(k, JSONObject().put("dtype", "F32").put("shape", JSONArray(shape.toList()))
                .put("data_offsets", JSONArray(listOf(offset, offset + n))))
            offset += n
        }
        var headerBytes = header.toString().toByteArray(Charsets.UTF_8)
        val pad = (8 - headerBytes.size % 8) % 8
        headerBytes += ByteArray(pad) { 0x20.toByte() }   // spaces
        val tmp = File(file.parentFile, file.name + ".tmp")
        FileOutputStream(tmp).use { out ->
            val len = ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN).putLong(headerBytes.size.toLong())
            out.write(len.array()); out.write(headerBytes)
            for (k in keys) {
                val data = tensors.getValue(k).second
                val buf = ByteBuffer.allocate(data.size * 4).order(ByteOrder.LITTLE_ENDIAN)
                buf.asFloatBuffer().put(data)
                out.write(buf.array())
            }
            out.fd.sync()
        }
        check(tmp.renameTo(file)) { "could not rename $tmp to $file" }
    }
}
