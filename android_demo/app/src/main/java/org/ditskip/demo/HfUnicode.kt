package org.ditskip.demo

import java.util.Locale
import java.util.regex.Pattern

/**
 * What the tokenizer.json steps share (the Kotlin twin of ditskip_edge/runtime/tokenizer/unicode.py): character
 * classes, tokenizer.json regexes (Oniguruma) translated to the regex syntax java.util.regex and ICU share (ICU is
 * what Android's java.util.regex and iOS's NSRegularExpression run), grapheme clusters. Strings are UTF-16: indices
 * are UTF-16 offsets that always fall on code point boundaries; per-character rules read code points.
 *
 *   classBody        \p{L}, \p{N}, \w, \s as the port defines them: L and N are general categories; \w is L + M +
 *                    Nd + Nl + Pc + ZWNJ/ZWJ; \s is Unicode White_Space (never Java's or ICU's own \w / \s, which
 *                    differ between the JVM, Android and iOS)
 *   translateRegex   Oniguruma (Ruby syntax) -> Pattern with MULTILINE | UNIX_LINES (^ $ . see only \n, as Python's
 *                    re.MULTILINE); \d -> \p{Nd} (Python re's \d), \v -> the VT character, a { that opens no
 *                    quantifier -> \{, {,n} -> {0,n}; \b \B are refused here (Python re's \b is its own)
 *   graphemes        text -> clusters, the port's short rule set (what Precompiled looks up)
 */
object HfUnicode {
    /** Unicode White_Space: what `tokenizers` strips and splits on. */
    val WHITE_SPACE = listOf(0x09..0x0D, 0x20..0x20, 0x85..0x85, 0xA0..0xA0, 0x1680..0x1680, 0x2000..0x200A,
                             0x2028..0x2029, 0x202F..0x202F, 0x205F..0x205F, 0x3000..0x3000)
    /** Python's str.isspace(): White_Space plus the separators 0x1C-0x1F (str.strip() removes these). */
    private val PY_SPACE = WHITE_SPACE + listOf(0x1C..0x1F)

    private val CLASS_BODY = mapOf(
        'L' to "\\p{L}", 'N' to "\\p{N}",
        'w' to "\\p{L}\\p{M}\\p{Nd}\\p{Nl}\\p{Pc}\\x{200C}\\x{200D}",
        's' to WHITE_SPACE.joinToString("") { r ->
            if (r.first == r.last) "\\x{%X}".format(Locale.ROOT, r.first) else "\\x{%X}-\\x{%X}".format(Locale.ROOT, r.first, r.last) })
    private val PROPERTY_NAMES = mapOf("L" to 'L', "Letter" to 'L', "N" to 'N', "Number" to 'N')
    private const val UNSUPPORTED_ESCAPES = "hHRXKGkgyYOxbB"
    private val PROPERTY = Pattern.compile("\\{(\\^?)(\\w+)\\}")
    private val QUANTIFIER = Pattern.compile("\\{(\\d*)(,\\d*)?\\}")
    const val FLAGS = Pattern.MULTILINE or Pattern.UNIX_LINES

    fun isSpace(cp: Int): Boolean = WHITE_SPACE.any { cp in it }

    fun isPySpace(cp: Int): Boolean = PY_SPACE.any { cp in it }

    /** The port's \w: letters, marks, decimal and letter numbers, connector punctuation, ZWNJ, ZWJ. */
    fun isWordChar(cp: Int): Boolean = when (Character.getType(cp).toByte()) {
        Character.UPPERCASE_LETTER, Character.LOWERCASE_LETTER, Character.TITLECASE_LETTER, Character.MODIFIER_LETTER,
        Character.OTHER_LETTER, Character.NON_SPACING_MARK, Character.ENCLOSING_MARK, Character.COMBINING_SPACING_MARK,
        Character.DECIMAL_DIGIT_NUMBER, Character.LETTER_NUMBER, Character.CONNECTOR_PUNCTUATION -> true
        else -> cp == 0x200C || cp == 0x200D
    }

    fun isNumber(cp: Int): Boolean = when (Character.getType(cp).toByte()) {
        Character.DECIMAL_DIGIT_NUMBER, Character.LETTER_NUMBER, Character.OTHER_NUMBER -> true
        else -> false
    }

    fun isMark(cp: Int): Boolean = when (Character.getType(cp).toByte()) {
        Character.NON_SPACING_MARK, Character.ENCLOSING_MARK, Character.COMBINING_SPACING_MARK -> true
        else -> false
    }

    /** Python's str.strip(): leading and trailing str.isspace() characters removed (Kotlin's trim() differs). */
    fun pyStrip(text: String): String {
        var i = 0
        var j = text.length
        while (i < j && isPySpace(text.codePointAt(i))) i += Character.charCount(text.codePointAt(i))
        while (j > i && isPySpace(text.codePointBefore(j))) j -= Character.charCount(text.codePointBefore(j))
        return text.substring(i, j)
    }

    /** A tokenizer.json regex (Oniguruma, Ruby syntax) compiled; IllegalArgumentException naming `where` when it uses
     *  something the translation does not express (other \p classes, negated classes inside brackets, nested
     *  classes, POSIX brackets, \h \R \X \K \G \x{..} \b ...). */
    fun translateRegex(pattern: String, where: String): Pattern {
        val out = StringBuilder()
        var i = 0
        var inClass = false
        val n = pattern.length
        fun fail(what: String): Nothing = throw IllegalArgumentException("$where: regex '$pattern': $what is not supported")
        while (i < n) {
            val c = pattern[i]
            if (c == '\\' && i + 1 < n) {
                val e = pattern[i + 1]
                if (e == 'p' || e == 'P') {
                    val m = PROPERTY.matcher(pattern).region(i + 2, n)
                    val found = m.lookingAt()
                    if (!found || e == 'P' || m.group(1).isNotEmpty() || m.group(2) !in PROPERTY_NAMES)
                        fail("\\$e" + (if (found) m.group(0) else ""))
                    val body = CLASS_BODY.getValue(PROPERTY_NAMES.getValue(m.group(2)))
                    out.append(if (inClass) body else "[$body]")
                    i = m.end()
                    continue
                }
                when {
                    e in "sSwW" -> {
                        val body = CLASS_BODY.getValue(e.toLowerCase())
                        if (e.isUpperCase() && inClass) fail("\\$e inside [...]")
                        out.append(if (inClass) body else if (e.isUpperCase()) "[^$body]" else "[$body]")
                    }
                    e == 'd' -> out.append("\\p{Nd}")
                    e == 'D' -> out.append("\\P{Nd}")
                    e == 'v' -> out.append("\\x{B}")
                    e == 'z' && !inClass -> out.append("\\z")
                    e == 'Z' && !inClass -> out.append("(?=\\n?\\z)")
                    e in UNSUPPORTED_ESCAPES -> fail("\\$e")
                    else -> out.append(c).append(e)
                }
                i += 2
                continue
            }
            if (c == '[') {
                if (inClass) fail("a nested class or POSIX bracket [...[...]...]")
                inClass = true
                out.append(c)
                i += 1
                if (i < n && pattern[i] == '^') { out.append('^'); i += 1 }
                if (i < n && pattern[i] == ']') { out.append("\\]"); i += 1 }     // a leading ] is a literal in Ruby syntax
                continue
            }
            if (!inClass && c == '{') {                  // a quantifier, else a literal { (Java and ICU refuse a bare one)
                val m = QUANTIFIER.matcher(pattern).region(i, n)
                if (m.lookingAt() && (m.group(1).isNotEmpty() || (m.group(2) ?: ",").length > 1)) {
                    out.append("{").append(if (m.group(1).isEmpty()) "0" else m.group(1)).append(m.group(2) ?: "").append("}")
                    i = m.end()
                } else { out.append("\\{"); i += 1 }
                continue
            }
            if (!inClass && c == '}') { out.append("\\}"); i += 1; continue }
            if (c == ']' && inClass) inClass = false
            else if (inClass && pattern.startsWith("&&", i)) fail("class intersection &&")
            out.append(c)
            i += 1
        }
        try {
            return Pattern.compile(out.toString(), FLAGS)
        } catch (err: java.util.regex.PatternSyntaxException) {
            throw IllegalArgumentException("$where: regex '$pattern' does not compile as a Java regex (${err.description})")
        }
    }

    /** A Split / Replace `pattern` field: {"String": literal} or {"Regex": oniguruma pattern}. */
    fun compilePattern(spec: org.json.JSONObject, where: String): Pattern = when {
        spec.has("String") -> Pattern.compile(Pattern.quote(spec.getString("String")))
        spec.has("Regex") -> translateRegex(spec.getString("Regex"), where)
        else -> throw IllegalArgumentException("$where: pattern $spec is neither String nor Regex")
    }

    private fun hangulKind(cp: Int): String = when {
        cp in 0x1100..0x115F || cp in 0xA960..0xA97C -> "L"
        cp in 0x1160..0x11A7 || cp in 0xD7B0..0xD7C6 -> "V"
        cp in 0x11A8..0x11FF || cp in 0xD7CB..0xD7FB -> "T"
        cp in 0xAC00..0xD7A3 -> if ((cp - 0xAC00) % 28 == 0) "LV" else "LVT"
        else -> ""
    }

    private fun isControl(cp: Int): Boolean = when (Character.getType(cp).toByte()) {
        Character.CONTROL, Character.LINE_SEPARATOR, Character.PARAGRAPH_SEPARATOR -> true
        Character.FORMAT -> cp != 0x200C && cp != 0x200D
        else -> false
    }

    private fun isExtend(cp: Int): Boolean = isMark(cp) || cp == 0x200C || cp == 0x200D || cp == 0xFF9E ||
        cp == 0xFF9F || cp in 0x1F3FB..0x1F3FF || cp in 0xE0020..0xE007F

    private fun isPictographic(cp: Int): Boolean =
        cp in 0x1F000..0x1FAFF || (cp >= 0xA9 && Character.getType(cp).toByte() == Character.OTHER_SYMBOL)

    private fun isRegional(cp: Int): Boolean = cp in 0x1F1E6..0x1F1FF

    /** No grapheme break between the cluster cps[start until end] and `cp` (the UAX #29 rules that matter for prompts). */
    private fun joins(cps: IntArray, start: Int, end: Int, cp: Int): Boolean {
        val last = cps[end - 1]
        if (last == '\r'.toInt()) return cp == '\n'.toInt()
        if (isControl(last) || isControl(cp)) return false
        val a = hangulKind(last)
        val b = hangulKind(cp)
        if ((a == "L" && b in listOf("L", "V", "LV", "LVT")) || (a in listOf("LV", "V") && b in listOf("V", "T")) ||
            (a in listOf("LVT", "T") && b == "T")) return true
        if (isExtend(cp)) return true
        if (last == 0x200D && isPictographic(cp) && (start until end).any { isPictographic(cps[it]) }) return true
        return isRegional(cp) && (start until end).all { isRegional(cps[it]) } && (end - start) % 2 == 1
    }

    /** Grapheme clusters of `text`, each as a string. */
    fun graphemes(text: String): List<String> {
        val cps = text.codePoints().toArray()
        val out = ArrayList<String>()
        var start = 0
        for (k in 1..cps.size) {
            if (k == cps.size || !joins(cps, start, k, cps[k])) {
                out.add(String(cps, start, k - start))
                start = k
            }
        }
        return out
    }
}
