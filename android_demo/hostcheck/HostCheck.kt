// Host check (kotlinc on a plain JVM): runs the app's PortableRng and AdamW and prints what the Python test compares
// with ditskip_edge/rng.py and torch.optim.AdamW. Not part of the app.
import org.ditskip.demo.AdamW
import org.ditskip.demo.Patches
import org.ditskip.demo.PortableRng
import org.ditskip.demo.Schedule
import org.ditskip.demo.ScheduleConfig
import java.nio.ByteBuffer
import java.nio.ByteOrder

fun main(args: Array<String>) {
    if (args[0] == "schedule") return schedule(args.drop(1))
    if (args[0] == "patch") return patch(args.drop(1).map { it.toInt() })
    if (args[0] == "lr") return (0 until args[3].toInt()).forEach {           // lr SCHEDULE LR STEPS: one rate a line
        println(AdamW.lrAt(args[2].toDouble(), args[1], it, args[3].toInt()))
    }
    val seed = args[0].toLong()
    println("selfCheck " + PortableRng.selfCheck())
    println("normals " + PortableRng.normal(seed, 8).joinToString(" "))
    val p = ByteBuffer.allocateDirect(4 * 3).order(ByteOrder.nativeOrder()).asFloatBuffer()
    p.put(0, 1.0f); p.put(1, -2.0f); p.put(2, 0.5f)
    val opt = AdamW(1e-2, 0.9, 0.999, 1e-8, 1e-2)
    val grads = listOf(floatArrayOf(0.1f, -0.3f, 0.7f), floatArrayOf(-0.2f, 0.4f, 0.05f), floatArrayOf(0.3f, 0.3f, -0.6f))
    for (g in grads) opt.step(mapOf("w" to p), mapOf("w" to g))
    println("adamw " + (0 until 3).map { p.get(it) }.joinToString(" "))
}

// schedule STEPS GRAD_ACCUM S_MIN S_MAX MULTIPLE SEED T_SAMPLING DYNAMIC H,W [H,W ...]: one line per sample
// "index photo t x0 y0 side noise_seed" (the contract's schedule test vectors, checked by the Python test).
fun schedule(a: List<String>) {
    val cfg = ScheduleConfig(a[0].toInt(), a[1].toInt(), a[2].toInt(), a[3].toInt(), a[4].toInt(), a[5].toLong(), a[6],
                             a[7] == "true")
    val sizes = a.drop(8).map { hw -> hw.split(",").map { it.toInt() }.toIntArray() }
    for (s in Schedule.make(cfg, sizes)) {
        println("${s.index} ${s.photo} ${s.t} ${s.x0} ${s.y0} ${s.side} ${s.noiseSeed}")
    }
}

// patch H W X0 Y0 SIDE OUT: the crop of a deterministic test photo (value = ((i * 2654435761) mod 251) / 125 - 1 at
// flat index i of [3, H, W]), printed as one float per line (the Python test compares with runtime/patches.py).
fun patch(a: List<Int>) {
    val (h, w) = Pair(a[0], a[1])
    val photo = FloatArray(3 * h * w) { i -> ((i.toLong() * 2654435761L) % 251L).toFloat() / 125f - 1f }
    for (v in Patches.crop(photo, h, w, a[2], a[3], a[4], a[5])) println(v)
}
