package org.ditskip.demo

import org.json.JSONObject
import java.io.File
import java.util.Locale
import java.util.regex.Pattern

/**
 * A Hugging Face tokenizer.json run without `tokenizers`, the Kotlin twin of ditskip_edge/runtime/tokenizer/ (hf.py
 * here; the steps in HfUnicode.kt, HfNormalizers.kt, HfPreTokenizers.kt, HfModels.kt): the prompt's ids as
 * `transformers`' tokenizer(text, padding="max_length", max_length=maxLen, truncation=True) gives them, for the real
 * text encoders of FLUX.1 (CLIP, T5) and SANA (Gemma-2):
 *
 *   added tokens     `added_tokens` found literally become whole tokens first, leftmost-longest (normalized=false in
 *                    the raw text, normalized=true in the normalized text of what is left)
 *   normalizer       HfNormalizers
 *   pre-tokenizer    HfPreTokenizers
 *   model            HfModel (BPE, Unigram, WordLevel)
 *   post-processor   the special-token ids before and after the sequence (TemplateProcessing with one $A,
 *                    RobertaProcessing, BertProcessing, ByteLevel, Sequence)
 *   truncation       pieces cut to maxLen minus the specials, so the specials survive
 *   padding          right, with padId (the manifest's pad_id; else the JSON's `padding.pad_id`, else the first of
 *                    <pad>, <|endoftext|>, [PAD] in added_tokens, then in the vocabulary); mask 0 on pads
 *
 * Any other component type is refused naming its path in the JSON ("normalizer.normalizers[0]: type 'BertNormalizer'
 * is not supported"). Works on code points (a surrogate pair is one character).
 */
class HfTokenizer(doc: JSONObject, val maxLen: Int, padId: Int? = null) {
    private val normalize = HfNormalizers.build(doc.optObj("normalizer"))
    private val preTokenize = HfPreTokenizers.build(doc.optObj("pre_tokenizer"))
    private val model = HfModel.build(doc.getJSONObject("model"))
    private val before: List<Int>
    private val after: List<Int>
    private val added = AddedTokens(doc.optJSONArray("added_tokens"), normalize)
    val padId: Int

    init {
        val (b, a) = postProcessor(doc.optObj("post_processor"))
        before = b
        after = a
        require(maxLen >= before.size + after.size) {
            "max_len $maxLen leaves no room next to the post-processor's ${before.size + after.size} special tokens" }
        this.padId = padId ?: defaultPadId(doc)
    }

    private fun defaultPadId(doc: JSONObject): Int {
        doc.optObj("padding")?.let { return it.getInt("pad_id") }
        for (table in listOf(added.ids, model.vocab)) for (name in PAD_NAMES) table[name]?.let { return it }
        throw IllegalArgumentException("no pad token: the JSON has no `padding` and none of ${PAD_NAMES.joinToString(", ")} is in the vocabulary; pass pad_id")
    }

    /** The prompt's ids before the post-processor's special tokens, truncation and padding. */
    fun tokenIds(text: String): List<Int> {
        val ids = ArrayList<Int>()
        for ((a, b, tid) in added.split(text, raw = true)) {
            if (tid != null) { ids.add(tid); continue }
            val part = normalize(text.substring(a, b))
            for ((c, d, tid2) in added.split(part, raw = false)) {
                if (tid2 != null) ids.add(tid2)
                else if (d > c) {                                  // empty splits are dropped, as in `tokenizers`
                    for ((word, _) in preTokenize(listOf(part.substring(c, d) to (a == 0 && c == 0)))) ids.addAll(model.tokenize(word))
                }
            }
        }
        return ids
    }

    /** Tokens the encoder would read without truncation, special tokens included: generation refuses a prompt above
     *  maxLen for the encoder that limits the prompt. */
    fun countTokens(text: String): Int = before.size + tokenIds(text).size + after.size

    /** (input_ids, attention_mask), each maxLen long. */
    fun encode(text: String): Pair<LongArray, LongArray> {
        val ids = before + tokenIds(text).take(maxLen - before.size - after.size) + after
        val outIds = LongArray(maxLen) { if (it < ids.size) ids[it].toLong() else padId.toLong() }
        val mask = LongArray(maxLen) { if (it < ids.size) 1L else 0L }
        return outIds to mask
    }

    companion object {
        val PAD_NAMES = listOf("<pad>", "<|endoftext|>", "[PAD]")

        fun fromFile(file: File, maxLen: Int, padId: Int? = null): HfTokenizer = try {
            HfTokenizer(JSONObject(file.readText(Charsets.UTF_8)), maxLen, padId)
        } catch (err: IllegalArgumentException) {
            throw IllegalArgumentException("$file: ${err.message}", err)
        }

        /** A pipeline's own prompt preprocessing before its tokenizer (generation.text.encoders[].tokenizer.preprocess;
         *  SanaPipeline lower-cases and strips): Python's str.lower() (String.toLowerCase(Locale.ROOT): full case
         *  mapping, final sigma) and str.strip() (HfUnicode.pyStrip: Kotlin's trim() strips another set). */
        fun preprocess(prompt: String, rule: String): String = when (rule) {
            "none" -> prompt
            "lower_strip" -> HfUnicode.pyStrip(prompt.toLowerCase(Locale.ROOT))
            else -> throw IllegalArgumentException("generation.text.encoders[].tokenizer.preprocess '$rule': expected none or lower_strip")
        }

        /** (ids before the sequence, ids after it) that a `post_processor` entry adds to a single sequence. */
        fun postProcessor(spec: JSONObject?, where: String = "post_processor"): Pair<List<Int>, List<Int>> {
            if (spec == null) return emptyList<Int>() to emptyList()
            val kind = spec.optStr("type")
            return when (kind) {
                "Sequence" -> {
                    var before = emptyList<Int>()
                    var after = emptyList<Int>()
                    val list = spec.getJSONArray("processors")
                    for (i in 0 until list.length()) {
                        val (b, a) = postProcessor(list.getJSONObject(i), "$where.processors[$i]")
                        before = b + before
                        after = after + a
                    }
                    before to after
                }
                "ByteLevel" -> emptyList<Int>() to emptyList()
                "RobertaProcessing", "BertProcessing" ->
                    listOf(spec.getJSONArray("cls").getInt(1)) to listOf(spec.getJSONArray("sep").getInt(1))
                "TemplateProcessing" -> {
                    val before = ArrayList<Int>()
                    val after = ArrayList<Int>()
                    var seen = false
                    val single = spec.getJSONArray("single")
                    for (j in 0 until single.length()) {
                        val piece = single.getJSONObject(j)
                        if (piece.has("Sequence")) {
                            require(piece.getJSONObject("Sequence").getString("id") == "A" && !seen) {
                                "$where.single[$j]: only one \$A sequence is supported" }
                            seen = true
                        } else if (piece.has("SpecialToken")) {
                            val name = piece.getJSONObject("SpecialToken").getString("id")
                            val ids = spec.getJSONObject("special_tokens").getJSONObject(name).getJSONArray("ids")
                            for (k in 0 until ids.length()) (if (seen) after else before).add(ids.getInt(k))
                        } else throw IllegalArgumentException("$where.single[$j]: $piece is neither Sequence nor SpecialToken")
                    }
                    require(seen) { "$where.single: the template has no \$A" }
                    before to after
                }
                else -> throw IllegalArgumentException("$where: type '$kind' is not supported")
            }
        }
    }
}

/** tokenizer.json reads with Python's dict.get meaning: a JSON null is absent (org.json's optString gives "null"). */
internal fun JSONObject.optStr(key: String): String? = if (isNull(key)) null else getString(key)

internal fun JSONObject.optObj(key: String): JSONObject? = if (isNull(key)) null else getJSONObject(key)

internal fun JSONObject.optFlag(key: String, default: Boolean): Boolean =
    if (!has(key)) default else !isNull(key) && getBoolean(key)

/** The `added_tokens` step, first of all: tokens found literally in the text become whole tokens, leftmost-longest:
 *  normalized=false ones in the raw text, then normalized=true ones (their normalized form) in the normalized text of
 *  what is left; lstrip / rstrip / single_word as `tokenizers` applies them. */
class AddedTokens(entries: org.json.JSONArray?, normalize: (String) -> String) {
    private val raw = LinkedHashMap<String, JSONObject>()        // matched text -> entry
    private val normed = LinkedHashMap<String, JSONObject>()
    private val rawRegex: Pattern?
    private val normedRegex: Pattern?
    /** content -> id of every entry (the default pad token is looked up here first). */
    val ids = HashMap<String, Int>()

    init {
        for (i in 0 until (entries?.length() ?: 0)) {
            val e = entries!!.getJSONObject(i)
            val content = e.getString("content")
            ids[content] = e.getInt("id")
            if (content.isEmpty()) continue
            if (e.optFlag("normalized", !e.optFlag("special", false))) normed[normalize(content)] = e else raw[content] = e
        }
        rawRegex = regex(raw.keys)
        normedRegex = regex(normed.keys)
    }

    private fun regex(table: Collection<String>): Pattern? = if (table.isEmpty()) null else
        Pattern.compile(table.sortedByDescending { it.codePointCount(0, it.length) }.joinToString("|") { Pattern.quote(it) })

    /** (start, end, token id or null) covering text, with lstrip / rstrip / single_word applied. */
    fun split(text: String, raw: Boolean): List<Triple<Int, Int, Int?>> {
        val regex = if (raw) rawRegex else normedRegex
        val table = if (raw) this.raw else normed
        if (regex == null || text.isEmpty()) return listOf(Triple(0, text.length, null))
        val out = ArrayList<Triple<Int, Int, Int?>>()
        var done = 0
        val m = regex.matcher(text)
        while (m.find()) {
            var start = m.start()
            var stop = m.end()
            val e = table.getValue(m.group())
            if (e.optFlag("single_word", false) &&
                ((start > 0 && HfUnicode.isWordChar(text.codePointBefore(start))) ||
                 (stop < text.length && HfUnicode.isWordChar(text.codePointAt(stop))))) continue
            if (e.optFlag("lstrip", false)) {
                var left = start
                while (left > 0 && HfUnicode.isSpace(text[left - 1].toInt())) left -= 1
                start = maxOf(left, done)
            }
            if (e.optFlag("rstrip", false)) while (stop < text.length && HfUnicode.isSpace(text[stop].toInt())) stop += 1
            if (done < start) out.add(Triple(done, start, null))
            out.add(Triple(start, stop, e.getInt("id")))
            done = stop
        }
        if (done != text.length) out.add(Triple(done, text.length, null))
        return out
    }
}
