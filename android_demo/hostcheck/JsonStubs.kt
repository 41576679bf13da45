// Host stand-in of org.json (the Android platform copy) for the host check: see README.md here. Unlike the other stubs
// it runs: HfTokenizer.kt reads tokenizer.json through it on the JVM. Only the methods the app calls, with Android's
// meanings: a JSON null is JSONObject.NULL (isNull is true, optString gives "null"), getString / getInt / getDouble
// coerce numbers and numeric strings, get / getJSONObject throw JSONException on a missing key or another type, keys
// keep the file's order, a repeated key keeps its last value, integers parse as Int (Long when too large).
package org.json

class JSONException(message: String) : Exception(message)

private fun typeMismatch(where: Any, value: Any?, type: String): Nothing =
    throw JSONException("Value $value at $where of type ${value?.javaClass?.name} cannot be converted to $type")

private fun toInt(v: Any?): Int? = when (v) { is Int -> v; is Number -> v.toInt(); is String -> v.toDoubleOrNull()?.toInt(); else -> null }
private fun toLong(v: Any?): Long? = when (v) { is Long -> v; is Number -> v.toLong(); is String -> v.toDoubleOrNull()?.toLong(); else -> null }
private fun toDouble(v: Any?): Double? = when (v) { is Double -> v; is Number -> v.toDouble(); is String -> v.toDoubleOrNull(); else -> null }
private fun toBoolean(v: Any?): Boolean? = when {
    v is Boolean -> v
    v is String && v.equals("true", ignoreCase = true) -> true
    v is String && v.equals("false", ignoreCase = true) -> false
    else -> null
}
private fun toStr(v: Any?): String? = when (v) { null -> null; is String -> v; else -> v.toString() }

private fun wrap(v: Any?): Any? = when (v) {
    null -> JSONObject.NULL
    is Map<*, *> -> JSONObject(v)
    is Collection<*> -> JSONArray(v)
    else -> v
}

private fun quote(s: String): String {
    val b = StringBuilder("\"")
    for (c in s) when {
        c == '"' || c == '\\' -> b.append('\\').append(c)
        c == '\n' -> b.append("\\n")
        c < ' ' -> b.append("\\u%04x".format(c.toInt()))
        else -> b.append(c)
    }
    return b.append('"').toString()
}

private fun write(v: Any?, indent: Int, depth: Int, out: StringBuilder) {
    val pad = if (indent > 0) "\n" + " ".repeat(indent * (depth + 1)) else ""
    val end = if (indent > 0) "\n" + " ".repeat(indent * depth) else ""
    when (v) {
        is JSONObject -> {
            out.append('{')
            v.map.entries.forEachIndexed { i, (k, x) ->
                out.append(if (i > 0) "," else "").append(pad).append(quote(k)).append(if (indent > 0) ": " else ":")
                write(x, indent, depth + 1, out)
            }
            out.append(if (v.map.isEmpty()) "" else end).append('}')
        }
        is JSONArray -> {
            out.append('[')
            v.list.forEachIndexed { i, x -> out.append(if (i > 0) "," else "").append(pad); write(x, indent, depth + 1, out) }
            out.append(if (v.list.isEmpty()) "" else end).append(']')
        }
        is String -> out.append(quote(v))
        else -> out.append(v.toString())
    }
}

/** A recursive-descent reader of JSON text (JSONTokener's values). */
private class Reader(val s: String) {
    var i = 0
    fun fail(what: String): Nothing = throw JSONException("$what at character $i")
    fun skip() { while (i < s.length && s[i].isWhitespace()) i++ }
    fun next(): Char { skip(); if (i >= s.length) fail("End of input"); return s[i] }

    fun value(): Any {
        when (next()) {
            '{' -> {
                val o = JSONObject()
                i++
                if (next() == '}') { i++; return o }
                while (true) {
                    if (next() != '"') fail("Expected a name")
                    val k = string()
                    if (next() != ':') fail("Expected ':' after $k")
                    i++
                    o.map[k] = value()
                    when (next()) { ',' -> i++; '}' -> { i++; return o }; else -> fail("Unterminated object") }
                }
            }
            '[' -> {
                val a = JSONArray()
                i++
                if (next() == ']') { i++; return a }
                while (true) {
                    a.list.add(value())
                    when (next()) { ',' -> i++; ']' -> { i++; return a }; else -> fail("Unterminated array") }
                }
            }
            '"' -> return string()
            else -> return literal()
        }
    }

    fun string(): String {
        i++
        val b = StringBuilder()
        while (true) {
            if (i >= s.length) fail("Unterminated string")
            val c = s[i++]
            if (c == '"') return b.toString()
            if (c != '\\') { b.append(c); continue }
            when (val e = s[i++]) {
                'u' -> { b.append(s.substring(i, i + 4).toInt(16).toChar()); i += 4 }
                't' -> b.append('\t'); 'b' -> b.append('\b'); 'n' -> b.append('\n'); 'r' -> b.append('\r')
                'f' -> b.append('\u000C')
                else -> b.append(e)
            }
        }
    }

    fun literal(): Any {
        val start = i
        while (i < s.length && s[i] !in ",]} \t\r\n:") i++
        val t = s.substring(start, i)
        return when {
            t == "null" -> JSONObject.NULL
            t == "true" -> true
            t == "false" -> false
            t.isEmpty() -> fail("Expected a value")
            t.any { it == '.' || it == 'e' || it == 'E' } -> t.toDoubleOrNull() ?: fail("Bad number $t")
            else -> t.toLongOrNull()?.let { if (it in Int.MIN_VALUE..Int.MAX_VALUE) it.toInt() else it }
                ?: t.toDoubleOrNull() ?: fail("Bad number $t")
        }
    }
}

class JSONObject() {
    internal val map = LinkedHashMap<String, Any?>()

    constructor(s: String) : this() {
        val r = Reader(s)
        val v = r.value()
        if (v !is JSONObject) typeMismatch("top level", v, "JSONObject")
        map.putAll(v.map)
    }
    constructor(m: Map<*, *>) : this() { for ((k, v) in m) map[k.toString()] = wrap(v) }

    fun length(): Int = map.size
    fun keys(): Iterator<String> = map.keys.iterator()
    fun has(k: String): Boolean = k in map
    fun opt(k: String): Any? = map[k]
    fun get(k: String): Any = map[k] ?: throw JSONException("No value for $k")
    fun isNull(k: String): Boolean = map[k].let { it == null || it === NULL }
    fun getJSONObject(k: String): JSONObject = get(k) as? JSONObject ?: typeMismatch(k, get(k), "JSONObject")
    fun optJSONObject(k: String): JSONObject? = opt(k) as? JSONObject
    fun getJSONArray(k: String): JSONArray = get(k) as? JSONArray ?: typeMismatch(k, get(k), "JSONArray")
    fun optJSONArray(k: String): JSONArray? = opt(k) as? JSONArray
    fun getString(k: String): String = toStr(get(k)) ?: typeMismatch(k, get(k), "String")
    fun optString(k: String): String = optString(k, "")
    fun optString(k: String, d: String): String = toStr(opt(k)) ?: d
    fun getInt(k: String): Int = toInt(get(k)) ?: typeMismatch(k, get(k), "int")
    fun optInt(k: String): Int = optInt(k, 0)
    fun optInt(k: String, d: Int): Int = toInt(opt(k)) ?: d
    fun getLong(k: String): Long = toLong(get(k)) ?: typeMismatch(k, get(k), "long")
    fun getDouble(k: String): Double = toDouble(get(k)) ?: typeMismatch(k, get(k), "double")
    fun getBoolean(k: String): Boolean = toBoolean(get(k)) ?: typeMismatch(k, get(k), "boolean")
    fun optBoolean(k: String, d: Boolean): Boolean = toBoolean(opt(k)) ?: d
    fun put(k: String, v: Any?): JSONObject { if (v == null) map.remove(k) else map[k] = wrap(v); return this }
    fun toString(indent: Int): String = StringBuilder().also { write(this, indent, 0, it) }.toString()
    override fun toString(): String = toString(0)

    companion object {
        @JvmField val NULL: Any = object {
            override fun equals(other: Any?): Boolean = other === this || other == null
            override fun hashCode(): Int = 0
            override fun toString(): String = "null"
        }
    }
}

class JSONArray() {
    internal val list = ArrayList<Any?>()

    constructor(c: Collection<*>) : this() { for (v in c) list.add(wrap(v)) }
    constructor(s: String) : this() {
        val v = Reader(s).value()
        if (v !is JSONArray) typeMismatch("top level", v, "JSONArray")
        list.addAll(v.list)
    }

    fun length(): Int = list.size
    fun opt(i: Int): Any? = list.getOrNull(i)
    fun get(i: Int): Any = list.getOrNull(i) ?: throw JSONException("Index $i out of range [0..${list.size})")
    fun isNull(i: Int): Boolean = opt(i).let { it == null || it === JSONObject.NULL }
    fun getJSONObject(i: Int): JSONObject = get(i) as? JSONObject ?: typeMismatch(i, get(i), "JSONObject")
    fun getJSONArray(i: Int): JSONArray = get(i) as? JSONArray ?: typeMismatch(i, get(i), "JSONArray")
    fun getString(i: Int): String = toStr(get(i)) ?: typeMismatch(i, get(i), "String")
    fun getInt(i: Int): Int = toInt(get(i)) ?: typeMismatch(i, get(i), "int")
    fun getLong(i: Int): Long = toLong(get(i)) ?: typeMismatch(i, get(i), "long")
    fun getDouble(i: Int): Double = toDouble(get(i)) ?: typeMismatch(i, get(i), "double")
    override fun toString(): String = StringBuilder().also { write(this, 0, 0, it) }.toString()
}
