package org.ditskip.demo

import org.json.JSONObject
import java.util.Locale
import java.util.PriorityQueue

/**
 * The `model` step (ditskip_edge/runtime/tokenizer/models.py): a tokenizer.json `model` entry -> tokenize(word) = the
 * word's ids.
 *
 *   BPE        merges applied lowest rank first, leftmost on ties; continuing_subword_prefix, end_of_word_suffix, unk
 *              with fuse_unk, byte_fallback to "<0xNN>", ignore_merges (dropout other than 0 is refused)
 *   Unigram    Viterbi over piece scores, ties to the earlier and shorter piece; an uncovered character is unk with
 *              score min - 10; consecutive unks fused; byte_fallback
 *   WordLevel  the word's id, else unk
 *
 * Characters are code points. Each model caches the ids of up to CACHE_MAX_WORDS words; any other type is refused.
 */
abstract class HfModel {
    abstract val vocab: Map<String, Int>
    protected abstract fun compute(word: String): List<Int>
    private val cache = HashMap<String, List<Int>>()

    open fun tokenize(word: String): List<Int> {
        if (word.isEmpty()) return emptyList()
        cache[word]?.let { return it }
        if (cache.size >= CACHE_MAX_WORDS) cache.clear()
        return compute(word).also { cache[word] = it }
    }

    companion object {
        const val CACHE_MAX_WORDS = 10_000
        const val UNIGRAM_UNK_PENALTY = 10.0       // unk score = lowest piece score - this (as SentencePiece)

        fun build(spec: JSONObject, where: String = "model"): HfModel {
            val kind = spec.optStr("type") ?: if (spec.has("merges")) "BPE" else null   // very old files leave out the BPE type
            return when (kind) {
                "BPE" -> HfBpe(spec, where)
                "Unigram" -> HfUnigram(spec, where)
                "WordLevel" -> HfWordLevel(spec)
                else -> throw IllegalArgumentException("$where: type '$kind' is not supported")
            }
        }

        fun byteTokens(text: String): List<String> =
            text.toByteArray(Charsets.UTF_8).map { "<0x%02X>".format(Locale.ROOT, it.toInt() and 0xFF) }
    }
}

class HfBpe(spec: JSONObject, where: String) : HfModel() {
    override val vocab = HashMap<String, Int>()
    private val unk = spec.optStr("unk_token")
    private val prefix = spec.optStr("continuing_subword_prefix")
    private val suffix = spec.optStr("end_of_word_suffix")
    private val fuseUnk = spec.optFlag("fuse_unk", false)
    private val byteFallback = spec.optFlag("byte_fallback", false)
    private val ignoreMerges = spec.optFlag("ignore_merges", false)
    private val merges = HashMap<Long, Long>()             // (left id, right id) -> (rank, merged id), packed

    init {
        if (!spec.isNull("dropout") && spec.getDouble("dropout") != 0.0)
            throw IllegalArgumentException("$where: BPE dropout ${spec.getDouble("dropout")} is not supported (sampling, not a function)")
        val v = spec.getJSONObject("vocab")
        for (k in v.keys()) vocab[k] = v.getInt(k)
        val list = spec.optJSONArray("merges")
        val cut = (prefix ?: "").codePointCount(0, (prefix ?: "").length)
        for (rank in 0 until (list?.length() ?: 0)) {
            val m = list!!.get(rank)
            val (left, right) = if (m is String) m.split(" ").also {
                require(it.size == 2) { "$where.merges[$rank]: '$m' is not two symbols separated by one space" }
            } else (m as org.json.JSONArray).let { listOf(it.getString(0), it.getString(1)) }
            val rest = right.substring(right.offsetByCodePoints(0, minOf(cut, right.codePointCount(0, right.length))))
            val ids = listOf(left, right, left + rest).map {
                vocab[it] ?: throw IllegalArgumentException("$where.merges[$rank]: '$it' is not in the vocabulary") }
            merges[pair(ids[0], ids[1])] = (rank.toLong() shl 32) or ids[2].toLong()
        }
    }

    private fun pair(a: Int, b: Int): Long = (a.toLong() shl 32) or (b.toLong() and 0xFFFFFFFFL)

    /** One id per code point (prefix / suffix added), byte-fallback ids, or unk (fused when fuse_unk). */
    private fun symbols(word: String): MutableList<Int> {
        val ids = ArrayList<Int>()
        var unkPending = false
        val cps = word.codePoints().toArray()
        for ((i, cp) in cps.withIndex()) {
            var s = String(Character.toChars(cp))
            if (i > 0 && prefix != null) s = prefix + s
            if (i == cps.size - 1 && suffix != null) s += suffix
            val id = vocab[s]
            if (id != null) {
                if (unkPending) { ids.add(vocab.getValue(unk!!)); unkPending = false }
                ids.add(id)
                continue
            }
            if (byteFallback) {
                val fallback = HfModel.byteTokens(s).map { vocab[it] }
                if (null !in fallback) { fallback.forEach { ids.add(it!!) }; continue }   // a pending unk stays pending
            }
            if (unk != null) {
                require(unk in vocab) { "model: unk_token '$unk' is not in the vocabulary" }
                if (unkPending && !fuseUnk) ids.add(vocab.getValue(unk))
                unkPending = true
            }
        }
        if (unkPending) ids.add(vocab.getValue(unk!!))
        return ids
    }

    /** Word::merge_all: a heap of (rank, position, merged id) over a linked list of symbols, so the lowest rank merges
     *  first and the leftmost on ties; an entry whose pair has changed since is skipped. */
    private fun merge(word: String): List<Int> {
        val ids = symbols(word)
        val n = ids.size
        val nxt = IntArray(n) { it + 1 }
        val prv = IntArray(n) { it - 1 }
        val alive = BooleanArray(n) { true }
        val heap = PriorityQueue<IntArray>(Comparator { a, b ->
            if (a[0] != b[0]) a[0].compareTo(b[0]) else if (a[1] != b[1]) a[1].compareTo(b[1]) else a[2].compareTo(b[2]) })
        fun push(a: Int, b: Int) {
            val m = merges[pair(ids[a], ids[b])] ?: return
            heap.add(intArrayOf((m ushr 32).toInt(), a, m.toInt()))
        }
        for (i in 0 until n - 1) push(i, i + 1)
        while (heap.isNotEmpty()) {
            val (_, i, merged) = heap.poll()
            val j = nxt[i]
            if (!alive[i] || j >= n) continue
            val m = merges[pair(ids[i], ids[j])]
            if (m == null || m.toInt() != merged) continue
            ids[i] = merged
            alive[j] = false
            nxt[i] = nxt[j]
            if (nxt[i] < n) prv[nxt[i]] = i
            if (prv[i] >= 0) push(prv[i], i)
            if (nxt[i] < n) push(i, nxt[i])
        }
        return (0 until n).filter { alive[it] }.map { ids[it] }
    }

    override fun tokenize(word: String): List<Int> {
        if (word.isEmpty()) return emptyList()
        if (ignoreMerges) vocab[word]?.let { return listOf(it) }
        return super.tokenize(word)
    }

    override fun compute(word: String): List<Int> = merge(word)
}

class HfUnigram(spec: JSONObject, where: String) : HfModel() {
    override val vocab = HashMap<String, Int>()                 // a repeated piece: the last id
    private val scores: DoubleArray
    private val unkId: Int? = if (spec.isNull("unk_id")) null else spec.getInt("unk_id")
    private val byteFallback = spec.optFlag("byte_fallback", false)
    private val unkScore: Double
    private val maxPieceChars: Int

    init {
        val pieces = spec.getJSONArray("vocab")
        scores = DoubleArray(pieces.length()) { pieces.getJSONArray(it).getDouble(1) }
        var longest = 0
        for (i in 0 until pieces.length()) {
            val p = pieces.getJSONArray(i).getString(0)
            vocab[p] = i
            longest = maxOf(longest, p.codePointCount(0, p.length))
        }
        maxPieceChars = longest
        if (unkId != null && unkId !in 0 until pieces.length())
            throw IllegalArgumentException("$where: unk_id $unkId is outside the vocabulary of ${pieces.length()}")
        unkScore = (scores.min() ?: 0.0) - UNIGRAM_UNK_PENALTY
    }

    /** Best segmentation (highest total score); ties keep the first candidate seen (earlier start, then shorter
     *  piece); code points no piece covers are unk; runs of unk come back fused. */
    private fun viterbi(cps: IntArray): List<String> {
        val n = cps.size
        val has = BooleanArray(n + 1)
        val score = DoubleArray(n + 1)
        val from = IntArray(n + 1)
        val id = IntArray(n + 1)
        has[0] = true; id[0] = -1
        for (start in 0 until n) {
            val base = score[start]
            var single = false
            for (end in start + 1..minOf(n, start + maxPieceChars)) {
                val pid = vocab[String(cps, start, end - start)] ?: continue
                val cand = base + scores[pid]
                if (!has[end] || cand > score[end]) { has[end] = true; score[end] = cand; from[end] = start; id[end] = pid }
                single = single || end == start + 1
            }
            if (!single) {
                if (unkId == null)
                    throw IllegalArgumentException("model: no piece covers '${String(cps, start, 1)}' and the Unigram has no unk_id")
                val cand = base + unkScore
                if (!has[start + 1] || cand > score[start + 1]) {
                    has[start + 1] = true; score[start + 1] = cand; from[start + 1] = start; id[start + 1] = unkId
                }
            }
        }
        val pieces = ArrayList<String>()
        val unkRun = StringBuilder()                           // the unk run, read backwards
        var end = n
        while (end > 0) {
            val start = from[end]
            val piece = String(cps, start, end - start)
            if (id[end] == unkId) unkRun.insert(0, piece)
            else {
                if (unkRun.isNotEmpty()) { pieces.add(unkRun.toString()); unkRun.setLength(0) }
                pieces.add(piece)
            }
            end = start
        }
        if (unkRun.isNotEmpty()) pieces.add(unkRun.toString())
        return pieces.asReversed()
    }

    override fun compute(word: String): List<Int> {
        val out = ArrayList<Int>()
        for (piece in viterbi(word.codePoints().toArray())) {
            val pid = vocab[piece]
            if (pid == null && byteFallback) {
                val fallback = HfModel.byteTokens(piece).map { vocab[it] }
                if (null !in fallback) { fallback.forEach { out.add(it!!) }; continue }
            }
            out.add(pid ?: unkId!!)
        }
        return out
    }
}

class HfWordLevel(spec: JSONObject) : HfModel() {
    override val vocab = HashMap<String, Int>()
    private val unk = spec.optStr("unk_token")

    init {
        val v = spec.getJSONObject("vocab")
        for (k in v.keys()) vocab[k] = v.getInt(k)
    }

    override fun compute(word: String): List<Int> {
        vocab[word]?.let { return listOf(it) }
        unk?.let { u -> vocab[u]?.let { return listOf(it) } }
        throw IllegalArgumentException("model: '$word' is not in the WordLevel vocabulary and unk_token '$unk' is missing")
    }
}
