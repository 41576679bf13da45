package org.ditskip.demo

import java.math.BigDecimal
import java.math.MathContext
import java.math.RoundingMode

/**
 * JSON read and written byte for byte as Python's `json` module does, for the files the device writes that a Python
 * reader hashes or compares: the residual cache's index (`json.dumps(index, indent=1)`), its journal lines
 * (`separators=(",", ":")`) and the identity digest (`json.dumps(identity, sort_keys=True)`), runtime/cache.py.
 *
 * Values: Map<String, Any?> (LinkedHashMap: key order kept), List<Any?>, String, Long (integers), Double (numbers
 * with a fraction or an exponent), Boolean, null. Doubles are written as Python's repr (the shortest digits that
 * read back to the same double; exponent form below 1e-4 and from 1e16), strings with ensure_ascii escapes.
 * org.json is not used here: it turns 1.0 into 1 and knows neither Python's float repr nor its separators.
 */
object PyJson {
    // ------------------------------------------------------------------------------------------------ writing
    /** json.dumps(v, indent=indent, sort_keys=sortKeys, separators=compact ? (",", ":") : default). */
    fun dumps(v: Any?, indent: Int? = null, sortKeys: Boolean = false, compact: Boolean = false): String {
        val sb = StringBuilder()
        val itemSep = if (compact) "," else if (indent != null) "," else ", "
        val keySep = if (compact) ":" else ": "
        write(sb, v, indent, sortKeys, itemSep, keySep, 0)
        return sb.toString()
    }

    private fun write(sb: StringBuilder, v: Any?, indent: Int?, sortKeys: Boolean, itemSep: String, keySep: String,
                      level: Int) {
        when (v) {
            null -> sb.append("null")
            is Boolean -> sb.append(if (v) "true" else "false")
            is String -> quote(sb, v)
            is Double -> sb.append(floatRepr(v))
            is Float -> sb.append(floatRepr(v.toDouble()))
            is Long, is Int, is Short, is Byte -> sb.append(v.toString())
            is Map<*, *> -> {
                if (v.isEmpty()) { sb.append("{}"); return }
                val keys = v.keys.map { it as String }.let { if (sortKeys) it.sorted() else it }
                sb.append('{')
                for ((i, k) in keys.withIndex()) {
                    if (i > 0) sb.append(itemSep)
                    newline(sb, indent, level + 1)
                    quote(sb, k); sb.append(keySep)
                    write(sb, v[k], indent, sortKeys, itemSep, keySep, level + 1)
                }
                newline(sb, indent, level)
                sb.append('}')
            }
            is List<*> -> {
                if (v.isEmpty()) { sb.append("[]"); return }
                sb.append('[')
                for ((i, x) in v.withIndex()) {
                    if (i > 0) sb.append(itemSep)
                    newline(sb, indent, level + 1)
                    write(sb, x, indent, sortKeys, itemSep, keySep, level + 1)
                }
                newline(sb, indent, level)
                sb.append(']')
            }
            is IntArray -> write(sb, v.map { it.toLong() }, indent, sortKeys, itemSep, keySep, level)
            else -> throw IllegalArgumentException("PyJson: cannot write a ${v.javaClass.name}")
        }
    }

    private fun newline(sb: StringBuilder, indent: Int?, level: Int) {
        if (indent == null) return
        sb.append('\n')
        for (i in 0 until indent * level) sb.append(' ')
    }

    private fun quote(sb: StringBuilder, s: String) {
        sb.append('"')
        for (c in s) {
            when (c) {
                '"' -> sb.append("\\\"")
                '\\' -> sb.append("\\\\")
                '\n' -> sb.append("\\n")
                '\r' -> sb.append("\\r")
                '\t' -> sb.append("\\t")
                '\b' -> sb.append("\\b")
                '\u000C' -> sb.append("\\f")
                else -> if (c < ' ' || c > '~') sb.append("\\u").append(String.format("%04x", c.toInt())) else sb.append(c)
            }
        }
        sb.append('"')
    }

    /** Python's repr(float): the shortest decimal that reads back to d, fixed notation for 1e-4 <= |d| < 1e16. */
    fun floatRepr(d: Double): String {
        if (d.isNaN()) return "NaN"
        if (d.isInfinite()) return if (d > 0) "Infinity" else "-Infinity"
        if (d == 0.0) return if (1.0 / d < 0) "-0.0" else "0.0"
        val exact = BigDecimal(d)
        var r = exact
        for (p in 1..17) {
            r = exact.round(MathContext(p, RoundingMode.HALF_EVEN))
            if (r.toDouble() == d) break
        }
        var digits = r.unscaledValue().abs().toString()
        var scale = r.scale()
        while (digits.length > 1 && digits.endsWith("0")) { digits = digits.dropLast(1); scale -= 1 }
        val decpt = digits.length - scale           // value = 0.<digits> * 10^decpt
        val sign = if (d < 0) "-" else ""
        if (decpt <= -4 || decpt > 16) {
            val mant = if (digits.length == 1) digits else digits[0] + "." + digits.substring(1)
            val e = decpt - 1
            return sign + mant + "e" + (if (e < 0) "-" else "+") + String.format("%02d", Math.abs(e))
        }
        return sign + when {
            decpt <= 0 -> "0." + "0".repeat(-decpt) + digits
            decpt >= digits.length -> digits + "0".repeat(decpt - digits.length) + ".0"
            else -> digits.substring(0, decpt) + "." + digits.substring(decpt)
        }
    }

    // ------------------------------------------------------------------------------------------------ reading
    /** Parse one JSON text (throws IllegalArgumentException on malformed or trailing input). */
    fun parse(text: String): Any? {
        val p = Parser(text)
        p.ws()
        val v = p.value()
        p.ws()
        require(p.i == text.length) { "JSON: trailing characters at ${p.i}" }
        return v
    }

    private class Parser(val s: String) {
        var i = 0

        fun ws() { while (i < s.length && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t')) i++ }

        fun value(): Any? {
            require(i < s.length) { "JSON: unexpected end" }
            return when (s[i]) {
                '{' -> obj()
                '[' -> arr()
                '"' -> str()
                't' -> lit("true", true)
                'f' -> lit("false", false)
                'n' -> lit("null", null)
                'N' -> lit("NaN", Double.NaN)
                'I' -> lit("Infinity", Double.POSITIVE_INFINITY)
                else -> num()
            }
        }

        fun lit(word: String, v: Any?): Any? {
            require(s.startsWith(word, i)) { "JSON: bad literal at $i" }
            i += word.length
            return v
        }

        fun obj(): Map<String, Any?> {
            val out = LinkedHashMap<String, Any?>()
            i++; ws()
            if (i < s.length && s[i] == '}') { i++; return out }
            while (true) {
                ws()
                require(i < s.length && s[i] == '"') { "JSON: expected a key at $i" }
                val k = str()
                ws(); require(i < s.length && s[i] == ':') { "JSON: expected ':' at $i" }; i++; ws()
                out[k] = value()
                ws()
                require(i < s.length) { "JSON: unexpected end" }
                if (s[i] == ',') { i++; continue }
                require(s[i] == '}') { "JSON: expected ',' or '}' at $i" }
                i++
                return out
            }
        }

        fun arr(): List<Any?> {
            val out = ArrayList<Any?>()
            i++; ws()
            if (i < s.length && s[i] == ']') { i++; return out }
            while (true) {
                ws()
                out.add(value())
                ws()
                require(i < s.length) { "JSON: unexpected end" }
                if (s[i] == ',') { i++; continue }
                require(s[i] == ']') { "JSON: expected ',' or ']' at $i" }
                i++
                return out
            }
        }

        fun str(): String {
            val sb = StringBuilder()
            i++
            while (true) {
                require(i < s.length) { "JSON: unterminated string" }
                val c = s[i++]
                when (c) {
                    '"' -> return sb.toString()
                    '\\' -> {
                        require(i < s.length) { "JSON: unterminated string" }
                        when (val e = s[i++]) {
                            'n' -> sb.append('\n'); 't' -> sb.append('\t'); 'r' -> sb.append('\r')
                            'b' -> sb.append('\b'); 'f' -> sb.append('\u000C')
                            'u' -> { sb.append(s.substring(i, i + 4).toInt(16).toChar()); i += 4 }
                            else -> sb.append(e)
                        }
                    }
                    else -> sb.append(c)
                }
            }
        }

        fun num(): Any {
            val start = i
            if (s.startsWith("-Infinity", i)) { i += 9; return Double.NEGATIVE_INFINITY }
            while (i < s.length && (s[i].isDigit() || s[i] in "+-.eE")) i++
            val t = s.substring(start, i)
            require(t.isNotEmpty()) { "JSON: unexpected character at $start" }
            return if (t.any { it == '.' || it == 'e' || it == 'E' }) t.toDouble() else t.toLong()
        }
    }
}
