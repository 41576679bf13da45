// Host check (kotlinc on a plain JVM): runs the app's PortableRng and AdamW and prints what the Python test compares
// with ditskip_edge/rng.py and torch.optim.AdamW. Not part of the app.
import org.ditskip.demo.AdamW
import org.ditskip.demo.PortableRng
import java.nio.ByteBuffer
import java.nio.ByteOrder

fun main(args: Array<String>) {
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
