// Host check of the app's tokenizer.json port (kotlinc on a plain JVM): tokenizes prompts with HfTokenizer.kt and prints
// what tests/test_bundle_contract.py compares with ditskip_edge/runtime/tokenizer/ (HFTokenizer). Not part of the app.
// args: tokenizer.json, max_len, pad_id, a file of hex-encoded UTF-8 prompts (one a line). One line per prompt:
// "tok <count> <ids,> <mask,>", then "pre <hex of HfTokenizer.preprocess(prompt, lower_strip)>".
import org.ditskip.demo.HfTokenizer
import java.io.File

fun stringToHex(s: String): String = s.toByteArray(Charsets.UTF_8).joinToString("") { "%02x".format(it.toInt() and 0xFF) }

fun main(args: Array<String>) {
    val tok = HfTokenizer.fromFile(File(args[0]), args[1].toInt(), args[2].toInt())
    for (line in File(args[3]).readLines()) {
        val p = hexToString(line)
        val (ids, mask) = tok.encode(p)
        println("tok ${tok.countTokens(p)} ${ids.joinToString(",")} ${mask.joinToString(",")}")
        println("pre ${stringToHex(HfTokenizer.preprocess(p, "lower_strip"))}")
    }
}
