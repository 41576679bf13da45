package org.ditskip.demo

import org.json.JSONObject
import java.util.regex.Pattern

/** A piece of text for the pre-tokenizer: (text, starts the text: for Metaspace prepend_scheme "first"). */
typealias HfPiece = Pair<String, Boolean>

/**
 * The `pre_tokenizer` step (ditskip_edge/runtime/tokenizer/pre_tokenizers.py): a tokenizer.json `pre_tokenizer` entry
 * -> a function over pieces, each resulting piece one word for the model. Sequence, Split (String or Regex; Removed /
 * Isolated / MergedWithPrevious / MergedWithNext / Contiguous; invert), ByteLevel (GPT-2 bytes_to_unicode;
 * add_prefix_space; use_regex), Metaspace (replacement, prepend_scheme always / first / never, split), Whitespace,
 * WhitespaceSplit, Digits; any other type is refused naming its path. The splitting helpers are `tokenizers`'
 * Pattern::find_matches and NormalizedString::split; offsets are UTF-16 indices on code point boundaries.
 */
object HfPreTokenizers {
    private class Seg(val start: Int, val end: Int, val match: Boolean)

    /** (start, end, is_match) covering text, as find_matches for a regex. */
    private fun regexSegments(regex: Pattern, text: String): List<Seg> {
        if (text.isEmpty()) return listOf(Seg(0, 0, false))
        val segs = ArrayList<Seg>()
        var prev = 0
        val m = regex.matcher(text)
        while (m.find()) {
            if (prev != m.start()) segs.add(Seg(prev, m.start(), false))
            segs.add(Seg(m.start(), m.end(), true))
            prev = m.end()
        }
        if (prev != text.length) segs.add(Seg(prev, text.length, false))
        return segs
    }

    /** As find_matches for a character predicate: every matching code point is a segment of its own. */
    private fun charSegments(isMatch: (Int) -> Boolean, text: String): List<Seg> {
        val segs = ArrayList<Seg>()
        var last = 0
        var i = 0
        while (i < text.length) {
            val cp = text.codePointAt(i)
            val next = i + Character.charCount(cp)
            if (isMatch(cp)) {
                if (last < i) segs.add(Seg(last, i, false))
                segs.add(Seg(i, next, true))
                last = next
            }
            i = next
        }
        if (last < text.length) segs.add(Seg(last, text.length, false))
        return segs
    }

    /** NormalizedString::split: which (start, end) pieces a SplitDelimiterBehavior keeps. */
    private fun splitBy(segments: List<Seg>, behavior: String, invert: Boolean = false): List<IntArray> {
        val segs = segments.map { Seg(it.start, it.end, it.match != invert) }
        if (behavior == "Removed") return segs.filter { !it.match }.map { intArrayOf(it.start, it.end) }
        if (behavior == "Isolated") return segs.map { intArrayOf(it.start, it.end) }
        val acc = ArrayList<IntArray>()
        var prev = false
        when (behavior) {
            "Contiguous" -> for (s in segs) {
                if (s.match == prev && acc.isNotEmpty()) acc.last()[1] = s.end else acc.add(intArrayOf(s.start, s.end))
                prev = s.match
            }
            "MergedWithPrevious" -> for (s in segs) {
                if (s.match && !prev && acc.isNotEmpty()) acc.last()[1] = s.end else acc.add(intArrayOf(s.start, s.end))
                prev = s.match
            }
            "MergedWithNext" -> {
                for (s in segs.asReversed()) {
                    if (s.match && !prev && acc.isNotEmpty()) acc.last()[0] = s.start else acc.add(intArrayOf(s.start, s.end))
                    prev = s.match
                }
                acc.reverse()
            }
            else -> throw IllegalArgumentException("split behavior '$behavior' is not supported")
        }
        return acc
    }

    /** GPT-2's reversible byte -> printable character table (ByteLevel). */
    private val BYTE_CHARS: Array<String> = run {
        val keep = (0x21..0x7E) + (0xA1..0xAC) + (0xAE..0xFF)
        val table = arrayOfNulls<String>(256)
        for (b in keep) table[b] = String(Character.toChars(b))
        var n = 0
        for (b in 0 until 256) if (table[b] == null) { table[b] = String(Character.toChars(256 + n)); n += 1 }
        Array(256) { table[it]!! }
    }
    private const val GPT2_SPLIT = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
    private val BEHAVIORS = listOf("Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous")

    /** Lift `text -> spans` to a pre-tokenizer over pieces; empty pieces are dropped. */
    private fun splitter(splitOne: (String) -> List<IntArray>): (List<HfPiece>) -> List<HfPiece> = { pieces ->
        pieces.flatMap { (text, first) ->
            splitOne(text).filter { it[1] > it[0] }.map { text.substring(it[0], it[1]) to (first && it[0] == 0) } }
    }

    private fun byteLevel(spec: JSONObject, where: String): (List<HfPiece>) -> List<HfPiece> {
        val addPrefixSpace = spec.optFlag("add_prefix_space", true)
        val regex = if (spec.optFlag("use_regex", true)) HfUnicode.translateRegex(GPT2_SPLIT, where) else null
        return { pieces ->
            val out = ArrayList<HfPiece>()
            for ((piece, first) in pieces) {
                val text = if (addPrefixSpace && !piece.startsWith(" ")) " $piece" else piece
                val spans = if (regex != null) splitBy(regexSegments(regex, text), "Isolated") else listOf(intArrayOf(0, text.length))
                for (s in spans) {
                    if (s[1] <= s[0]) continue
                    val word = StringBuilder()
                    for (b in text.substring(s[0], s[1]).toByteArray(Charsets.UTF_8)) word.append(BYTE_CHARS[b.toInt() and 0xFF])
                    out.add(word.toString() to (first && s[0] == 0))
                }
            }
            out
        }
    }

    private fun metaspace(spec: JSONObject, where: String): (List<HfPiece>) -> List<HfPiece> {
        val repl = spec.optStr("replacement") ?: "\u2581"
        var scheme = spec.optStr("prepend_scheme") ?: "always"
        if (spec.has("add_prefix_space") && !spec.isNull("add_prefix_space") && !spec.getBoolean("add_prefix_space")) scheme = "never"
        require(scheme in listOf("always", "first", "never")) { "$where: prepend_scheme '$scheme' is not supported" }
        val split = spec.optFlag("split", true)
        return { pieces ->
            val out = ArrayList<HfPiece>()
            for ((piece, first) in pieces) {
                var text = piece.replace(" ", repl)
                if (!text.startsWith(repl) && (scheme == "always" || (scheme == "first" && first))) text = repl + text
                val spans = if (split) splitBy(charSegments({ cp -> String(Character.toChars(cp)) == repl }, text), "MergedWithNext")
                            else listOf(intArrayOf(0, text.length))
                for (s in spans) if (s[1] > s[0]) out.add(text.substring(s[0], s[1]) to (first && s[0] == 0))
            }
            out
        }
    }

    /** A pieces -> pieces function for a `pre_tokenizer` entry (null: identity). */
    fun build(spec: JSONObject?, where: String = "pre_tokenizer"): (List<HfPiece>) -> List<HfPiece> {
        if (spec == null) return { pieces -> pieces }
        val kind = spec.optStr("type")
        return when (kind) {
            "Sequence" -> {
                val list = spec.getJSONArray("pretokenizers")
                val steps = (0 until list.length()).map { build(list.getJSONObject(it), "$where.pretokenizers[$it]") }
                val run: (List<HfPiece>) -> List<HfPiece> = { pieces -> steps.fold(pieces) { acc, step -> step(acc) } }
                run
            }
            "Split" -> {
                val regex = HfUnicode.compilePattern(spec.getJSONObject("pattern"), where)
                val behavior = spec.getString("behavior")
                val invert = spec.optFlag("invert", false)
                require(behavior in BEHAVIORS) { "$where: behavior '$behavior' is not supported" }
                splitter { t -> splitBy(regexSegments(regex, t), behavior, invert) }
            }
            "ByteLevel" -> byteLevel(spec, where)
            "Metaspace" -> metaspace(spec, where)
            "Whitespace" -> {
                val regex = HfUnicode.translateRegex("\\w+|[^\\w\\s]+", where)
                splitter { t -> splitBy(regexSegments(regex, t), "Removed", true) }
            }
            "WhitespaceSplit" -> splitter { t -> splitBy(charSegments(HfUnicode::isSpace, t), "Removed") }
            "Digits" -> {
                val behavior = if (spec.optFlag("individual_digits", false)) "Isolated" else "Contiguous"
                splitter { t -> splitBy(charSegments(HfUnicode::isNumber, t), behavior) }
            }
            else -> throw IllegalArgumentException("$where: type '$kind' is not supported")
        }
    }
}
