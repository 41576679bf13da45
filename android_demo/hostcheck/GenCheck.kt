// Host check of the generation parts (kotlinc on a plain JVM): runs the app's Wordpiece, HashText, Sampler and
// LoraMerge and prints what tests/test_bundle_contract.py compares with the runtime package. Not part of the app.
// args: vocab.txt, a file of hex-encoded UTF-8 prompts (one a line)
import org.ditskip.demo.HashText
import org.ditskip.demo.LoraMerge
import org.ditskip.demo.PortableRng
import org.ditskip.demo.RawTensor
import org.ditskip.demo.Safetensors
import org.ditskip.demo.Sampler
import org.ditskip.demo.Tiling
import org.ditskip.demo.Wordpiece
import java.io.File
import java.nio.ByteBuffer

fun hexToString(h: String): String = String(ByteArray(h.length / 2) { h.substring(2 * it, 2 * it + 2).toInt(16).toByte() }, Charsets.UTF_8)

fun main(args: Array<String>) {
    val wp = Wordpiece.fromFile(File(args[0]), 16)
    for (line in File(args[1]).readLines()) {
        val p = hexToString(line)
        val (ids, mask) = wp.encode(p)
        println("tok ${wp.countTokens(p)} ${ids.joinToString(",")} ${mask.joinToString(",")}")
    }
    for (arch in listOf("flux", "sana")) {
        val c = HashText.encode("A photo of SKS toy, 3 times!", arch, 8, 32, 32)
        for ((k, v) in c.toSortedMap()) println("hash $arch $k ${v.second.joinToString(" ")}")
    }
    println("sigmas a " + Sampler.sigmas(20, 1f, false, null, "exponential").joinToString(" "))
    println("sigmas b " + Sampler.sigmas(7, 3f, false, null, "exponential").joinToString(" "))
    println("sigmas c " + Sampler.sigmas(28, 3f, true, 0.95, "exponential").joinToString(" "))
    println("sigmas d " + Sampler.sigmas(4, 1f, true, 0.8, "linear").joinToString(" "))
    val (o, i, r) = Triple(24, 64, 4)
    val w = PortableRng.normal(1L, o * i).map { it * 0.3f }.toFloatArray()
    val a = PortableRng.normal(2L, r * i)
    val b = PortableRng.normal(3L, o * r).map { it * 0.1f }.toFloatArray()
    val (c8, s8) = LoraMerge.quantize(w, o, i, 8)
    println("q8 ${c8.joinToString(" ")} | ${s8.joinToString(" ")}")
    val raw8 = mapOf("w_codes" to RawTensor("I8", longArrayOf(o.toLong(), i.toLong()), ByteBuffer.wrap(c8)),
                     "w_scale" to RawTensor("F32", longArrayOf(o.toLong(), 1), ByteBuffer.wrap(Safetensors.f32Bytes(s8))))
    val m8 = LoraMerge.merge(raw8, a, b, r, 0.5f, 32)
    println("m8 ${m8.getValue("w_codes").third.joinToString(" ")}")
    val (c4, s4) = LoraMerge.quantize(w, o * i / 32, 32, 4)
    val p4 = LoraMerge.packInt4(c4)
    println("q4 ${p4.joinToString(" ") { (it.toInt() and 0xFF).toString() }} | ${s4.joinToString(" ")}")
    val raw4 = mapOf("w_packed" to RawTensor("U8", longArrayOf(o.toLong(), (i / 2).toLong()), ByteBuffer.wrap(p4)),
                     "w_scale" to RawTensor("F32", longArrayOf(o.toLong(), (i / 32).toLong(), 1), ByteBuffer.wrap(Safetensors.f32Bytes(s4))))
    val m4 = LoraMerge.merge(raw4, a, b, r, 0.5f, 32)
    println("m4 ${m4.getValue("w_packed").third.joinToString(" ") { (it.toInt() and 0xFF).toString() }}")
    // tiled decode with a stand-in decoder (tests/test_bundle_contract.py TILE_DECODER): channel mix + nearest upsample
    for ((name, shape) in listOf("t1" to intArrayOf(11, 9, 4, 3, 2), "t2" to intArrayOf(8, 8, 8, 8, 4), "t3" to intArrayOf(7, 10, 3, 2, 3))) {
        val (h, w, tile, stride, scale) = shape.toList()
        val c = 2
        val lat = PortableRng.normal(5L, c * h * w)
        val img = Tiling.decodeTiled(lat, c, h, w, tile, stride, scale) { t, th, tw ->
            Tiling.Tile(3, th * scale, tw * scale, FloatArray(3 * th * scale * tw * scale) { q ->
                val o = q / (th * scale * tw * scale); val y = q / (tw * scale) % (th * scale); val x = q % (tw * scale)
                val a = t[(0 * th + y / scale) * tw + x / scale]; val b = t[(1 * th + y / scale) * tw + x / scale]
                a * (o + 1).toFloat() - b * 0.5f + (x % scale).toFloat() * 0.25f }) }
        println("tiled $name ${img.h} ${img.w} ${img.data.joinToString(" ")}")
    }
}
