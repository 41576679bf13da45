// Compile-only stub of org.json (the Android platform copy) for the host type-check: see README.md here.
package org.json
class JSONObject() {
    constructor(s: String) : this()
    constructor(m: Map<*, *>) : this()
    fun keys(): Iterator<String> = TODO()
    fun getJSONObject(k: String): JSONObject = TODO()
    fun optJSONObject(k: String): JSONObject? = TODO()
    fun getJSONArray(k: String): JSONArray = TODO()
    fun optJSONArray(k: String): JSONArray? = TODO()
    fun getString(k: String): String = TODO()
    fun optString(k: String): String = TODO()
    fun optString(k: String, d: String): String = TODO()
    fun getInt(k: String): Int = TODO()
    fun optInt(k: String): Int = TODO()
    fun getLong(k: String): Long = TODO()
    fun getDouble(k: String): Double = TODO()
    fun getBoolean(k: String): Boolean = TODO()
    fun isNull(k: String): Boolean = TODO()
    fun put(k: String, v: Any?): JSONObject = TODO()
    fun toString(indent: Int): String = TODO()
}
class JSONArray() {
    constructor(c: Collection<*>) : this()
    constructor(s: String) : this()
    fun length(): Int = TODO()
    fun getJSONObject(i: Int): JSONObject = TODO()
    fun getJSONArray(i: Int): JSONArray = TODO()
    fun getString(i: Int): String = TODO()
    fun getInt(i: Int): Int = TODO()
    fun getLong(i: Int): Long = TODO()
    fun getDouble(i: Int): Double = TODO()
}
