package org.ditskip.demo

import org.json.JSONArray
import org.json.JSONObject
import java.nio.ByteBuffer
import java.nio.ByteOrder
import java.text.Normalizer
import java.util.Base64
import java.util.Locale
import java.util.regex.Matcher

/**
 * The `normalizer` step (ditskip_edge/runtime/tokenizer/normalizers.py): a tokenizer.json `normalizer` entry -> a
 * String -> String function. Sequence, NFC/NFD/NFKC/NFKD (java.text.Normalizer), Lowercase (per code point, as
 * Rust's char::to_lowercase), Replace (String or Regex), Prepend, Strip, StripAccents, Precompiled (SentencePiece's
 * charsmap); any other type is refused naming its path in the JSON.
 */
object HfNormalizers {
    fun build(spec: JSONObject?, where: String = "normalizer"): (String) -> String {
        if (spec == null) return { s -> s }
        val kind = spec.optStr("type")
        return when (kind) {
            "Sequence" -> {
                val list = spec.getJSONArray("normalizers")
                val steps = (0 until list.length()).map { build(list.getJSONObject(it), "$where.normalizers[$it]") }
                val run: (String) -> String = { s -> steps.fold(s) { acc, step -> step(acc) } }
                run
            }
            "NFC", "NFD", "NFKC", "NFKD" -> {
                val form = Normalizer.Form.valueOf(kind!!)
                val run: (String) -> String = { s -> Normalizer.normalize(s, form) }
                run
            }
            "Lowercase" -> ::lowercase
            "Replace" -> {
                val regex = HfUnicode.compilePattern(spec.getJSONObject("pattern"), where)
                val content = Matcher.quoteReplacement(spec.getString("content"))
                val run: (String) -> String = { s -> regex.matcher(s).replaceAll(content) }
                run
            }
            "Prepend" -> {
                val prepend = spec.getString("prepend")
                val run: (String) -> String = { s -> if (s.isEmpty()) s else prepend + s }
                run
            }
            "Strip" -> {
                val left = spec.optFlag("strip_left", false)
                val right = spec.optFlag("strip_right", false)
                val run: (String) -> String = { s -> strip(s, left, right) }
                run
            }
            "StripAccents" -> ::stripAccents
            "Precompiled" -> {
                val blob = if (spec.isNull("precompiled_charsmap")) null else spec.get("precompiled_charsmap")
                val bytes = when (blob) {
                    is String -> Base64.getDecoder().decode(blob)
                    is JSONArray -> ByteArray(blob.length()) { blob.getInt(it).toByte() }
                    else -> ByteArray(0)
                }
                val identity: (String) -> String = { s -> s }
                if (bytes.isEmpty()) identity else Precompiled(bytes)::apply
            }
            else -> throw IllegalArgumentException("$where: type '$kind' is not supported")
        }
    }

    /** Per code point, as `"".join(c.lower() for c in s)` (no context: a lone capital sigma is always σ). */
    fun lowercase(text: String): String {
        val out = StringBuilder(text.length)
        var i = 0
        while (i < text.length) {
            val cp = text.codePointAt(i)
            if (cp < 0x80) out.append(Character.toLowerCase(cp).toChar())
            else out.append(String(Character.toChars(cp)).toLowerCase(Locale.ROOT))
            i += Character.charCount(cp)
        }
        return out.toString()
    }

    fun stripAccents(text: String): String {
        val out = StringBuilder(text.length)
        text.codePoints().forEach { cp -> if (!HfUnicode.isMark(cp)) out.appendCodePoint(cp) }
        return out.toString()
    }

    fun strip(text: String, left: Boolean, right: Boolean): String {
        var i = 0
        var j = text.length
        while (left && i < j && HfUnicode.isSpace(text[i].toInt())) i += 1        // White_Space is all in the BMP
        while (right && j > i && HfUnicode.isSpace(text[j - 1].toInt())) j -= 1
        return text.substring(i, j)
    }
}

/**
 * SentencePiece's precompiled charsmap: a darts-clone double-array trie over UTF-8 keys, then a pool of NUL-terminated
 * replacements. A grapheme cluster under 6 UTF-8 bytes is looked up whole; otherwise (or with no hit) each code point
 * is. A lookup takes the *shortest* key that prefixes the chunk, as `spm_precompiled` does.
 */
class Precompiled(charsmap: ByteArray) {
    private val units: IntArray                 // u32 trie units (compared and shifted unsigned)
    private val pool: ByteArray

    init {
        val bb = ByteBuffer.wrap(charsmap).order(ByteOrder.LITTLE_ENDIAN)
        val trieBytes = bb.getInt(0)
        units = IntArray(trieBytes / 4) { bb.getInt(4 + 4 * it) }
        pool = charsmap.copyOfRange(4 + trieBytes, charsmap.size)
    }

    private fun offset(unit: Int): Int = (unit ushr 10) shl ((unit and (1 shl 9)) ushr 6)

    fun transform(chunk: String): String? {
        var pos = offset(units[0])
        for (b in chunk.toByteArray(Charsets.UTF_8)) {
            val byte = b.toInt() and 0xFF
            if (byte == 0) return null
            pos = pos xor byte
            val unit = units[pos]
            if ((unit and (Int.MIN_VALUE or 0xFF)) != byte) return null
            pos = pos xor offset(unit)
            if ((unit ushr 8) and 1 != 0) {
                val start = units[pos] and 0x7FFFFFFF
                var end = start
                while (pool[end] != 0.toByte()) end += 1
                return String(pool, start, end - start, Charsets.UTF_8)
            }
        }
        return null
    }

    fun apply(text: String): String {
        val out = StringBuilder(text.length)
        for (g in HfUnicode.graphemes(text)) {
            val norm = if (g.toByteArray(Charsets.UTF_8).size < WHOLE_GRAPHEME_BYTES) transform(g) else null
            if (norm != null) { out.append(norm); continue }
            g.codePoints().forEach { cp ->
                val ch = String(Character.toChars(cp))
                out.append(transform(ch) ?: ch)
            }
        }
        return out.toString()
    }

    companion object {
        const val WHOLE_GRAPHEME_BYTES = 6      // graphemes shorter than this are looked up whole
    }
}
