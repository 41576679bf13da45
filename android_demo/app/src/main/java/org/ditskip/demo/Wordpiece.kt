package org.ditskip.demo

import java.io.File
import java.text.Normalizer

/**
 * BERT-uncased WordPiece tokenization (flux-testbed's MiniLM), the Kotlin twin of ditskip_edge/runtime/wordpiece.py:
 * clean text, space out CJK ideographs, lower-case, strip accents (NFD, drop non-spacing marks), split on whitespace
 * and punctuation, greedy longest-match pieces ("##" continuations, [UNK] for a word with no match or > 100 chars),
 * then [CLS] pieces [SEP] padded with [PAD]. Iterates code points (emoji are surrogate pairs in a Kotlin String).
 */
class Wordpiece(private val vocab: Map<String, Int>, val maxLen: Int) {
    private val unk = vocab.getValue("[UNK]")
    private val cls = vocab.getValue("[CLS]")
    private val sep = vocab.getValue("[SEP]")
    private val pad = vocab.getValue("[PAD]")

    companion object {
        const val MAX_WORD_CHARS = 100
        fun fromFile(file: File, maxLen: Int): Wordpiece {
            val vocab = HashMap<String, Int>()
            file.useLines(Charsets.UTF_8) { lines -> lines.forEachIndexed { i, w -> vocab[w] = i } }
            return Wordpiece(vocab, maxLen)
        }

        private val CJK = listOf(0x4E00..0x9FFF, 0x3400..0x4DBF, 0x20000..0x2A6DF, 0x2A700..0x2B73F, 0x2B740..0x2B81F,
                                 0x2B820..0x2CEAF, 0xF900..0xFAFF, 0x2F800..0x2FA1F)

        private fun isControlLike(cp: Int): Boolean = when (Character.getType(cp).toByte()) {
            Character.CONTROL, Character.FORMAT, Character.PRIVATE_USE, Character.SURROGATE, Character.UNASSIGNED -> true
            else -> false
        }

        private fun isPunct(cp: Int): Boolean {
            if (cp in 33..47 || cp in 58..64 || cp in 91..96 || cp in 123..126) return true
            return when (Character.getType(cp).toByte()) {
                Character.CONNECTOR_PUNCTUATION, Character.DASH_PUNCTUATION, Character.START_PUNCTUATION,
                Character.END_PUNCTUATION, Character.INITIAL_QUOTE_PUNCTUATION, Character.FINAL_QUOTE_PUNCTUATION,
                Character.OTHER_PUNCTUATION -> true
                else -> false
            }
        }

        /** BertNormalizer + BertPreTokenizer: the words WordPiece splits. */
        fun basicWords(text: String): List<String> {
            val sb = StringBuilder()
            text.codePoints().forEach { cp ->
                val ws = cp == 0x20 || cp == 0x09 || cp == 0x0A || cp == 0x0D ||
                    Character.getType(cp).toByte() == Character.SPACE_SEPARATOR
                when {
                    cp == 0 || cp == 0xFFFD -> {}
                    ws -> sb.append(' ')
                    isControlLike(cp) -> {}
                    CJK.any { cp in it } -> { sb.append(' '); sb.appendCodePoint(cp); sb.append(' ') }
                    else -> sb.appendCodePoint(cp)
                }
            }
            val nfd = Normalizer.normalize(sb.toString().toLowerCase(java.util.Locale.ROOT), Normalizer.Form.NFD)
            val stripped = StringBuilder()
            nfd.codePoints().forEach { cp -> if (Character.getType(cp).toByte() != Character.NON_SPACING_MARK) stripped.appendCodePoint(cp) }
            val words = ArrayList<String>()
            for (w in stripped.split(' ')) {
                if (w.isEmpty()) continue
                val cur = StringBuilder()
                w.codePoints().forEach { cp ->
                    if (isPunct(cp)) {
                        if (cur.isNotEmpty()) { words.add(cur.toString()); cur.setLength(0) }
                        words.add(String(Character.toChars(cp)))
                    } else cur.appendCodePoint(cp)
                }
                if (cur.isNotEmpty()) words.add(cur.toString())
            }
            return words
        }
    }

    fun pieces(word: String): List<Int> {
        val cps = word.codePoints().toArray()
        if (cps.size > MAX_WORD_CHARS) return listOf(unk)
        val ids = ArrayList<Int>()
        var start = 0
        while (start < cps.size) {
            var end = cps.size
            var found: Int? = null
            while (start < end) {
                val piece = (if (start > 0) "##" else "") + String(cps, start, end - start)
                val id = vocab[piece]
                if (id != null) { found = id; break }
                end -= 1
            }
            if (found == null) return listOf(unk)
            ids.add(found); start = end
        }
        return ids
    }

    fun tokenIds(text: String): List<Int> = basicWords(text).flatMap { pieces(it) }

    /** Tokens the encoder reads, [CLS] and [SEP] included: generation refuses a prompt above maxLen. */
    fun countTokens(text: String): Int = tokenIds(text).size + 2

    /** (input_ids, attention_mask), each maxLen long. */
    fun encode(text: String): Pair<LongArray, LongArray> {
        val ids = listOf(cls) + tokenIds(text).take(maxLen - 2) + listOf(sep)
        val outIds = LongArray(maxLen) { if (it < ids.size) ids[it].toLong() else pad.toLong() }
        val mask = LongArray(maxLen) { if (it < ids.size) 1L else 0L }
        return outIds to mask
    }
}
