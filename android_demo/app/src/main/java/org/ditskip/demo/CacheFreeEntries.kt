package org.ditskip.demo

import org.json.JSONObject
import java.io.ByteArrayOutputStream
import java.io.File
import java.nio.ByteBuffer
import java.nio.ByteOrder
import java.util.zip.Inflater

/**
 * x0-only and cache-free bundles: sample -> its encoded cache entry, computed at the step, the twin of
 * runtime/subject.py `CacheFreeEntries`: x0 read from the bundle's x0 cache (x0-only) or computed from the sample's
 * photo (cache-free: `subject_stage.photos`, the normalised PNGs, read as photos.py read_png -> SubjectStage.x0, the
 * tile programs on the crop's tiles when the manifest's `encode_tiling` says so); noise = PortableRng(noise seed);
 * the residuals by SubjectStage.residuals (embed, then the block programs in order, one at a time); coded in memory
 * with the bundle's codec (CodecEncoder.encodeEntry = runtime/codecs.py encode_entry): exactly the entry a stored
 * cache's read would give. Refused in one line when made, before training: a codec this app cannot encode
 * (lowrank), a bundle without the programs it needs (forward.py subject_programs' message). `runner`: the bundle's
 * programs through ExecuTorch (EtForwardRunner), or the JVM check's stand-in.
 */
class CacheFreeEntries(private val bundle: TrainingBundle, private val runner: ForwardRunner) : EntrySource {
    val codec: CacheCodec
    val shapes = LinkedHashMap<String, IntArray>()
    val spans: SkipSpans
    val sMin: Int
    val tiling: EncodeTiling
    /** The text conditioning of the last sample's photo, as the embed program takes it (per-photo captions: rows). */
    private var cond: Pair<Int, Map<String, FloatTensor>>? = null
    private val photoFiles: List<String>
    private val photos = HashMap<Int, Triple<Int, Int, FloatArray>>()
    private val x0Cache: ResidualCache?
    override val parts: Map<String, Pair<String, LongArray>>

    init {
        val root = bundle.root
        require(bundle.cacheMode != BundleContract.STORED_MODE) { "$root: a stored bundle: its entries are its residual cache's" }
        val m = bundle.manifest
        val stage = m.getJSONObject("subject_stage")
        codec = CacheCodec.parse(stage.getString("cache_codec"))
        val es = stage.getJSONObject("entry_shapes")
        for (k in es.keys()) { val a = es.getJSONArray(k); shapes[k] = IntArray(a.length()) { a.getInt(it) } }
        codec.requireEncodable(shapes.keys.filter { it != BundleContract.X0_KEY })      // lowrank: refused here
        val plan = m.getJSONObject("plan")
        spans = SkipSpans(plan.getInt("num_blocks"), plan.getInt("n_front"), plan.getInt("n_back"))
        sMin = m.getJSONObject("schedule").getInt("s_min_px")
        tiling = encodeTilingOf(m, sMin)
        checkPrograms("$root/manifest.json")
        val ph = stage.optJSONArray("photos")
        photoFiles = if (ph == null) emptyList() else (0 until ph.length()).map { ph.getString(it) }
        x0Cache = if (bundle.cacheMode == BundleContract.X0_ONLY_MODE) bundle.cache else null
        require(x0Cache != null || photoFiles.isNotEmpty()) { "$root/manifest.json: a ${bundle.cacheMode} bundle without subject_stage.photos" }
        parts = codec.parts(shapes).mapValues { (_, v) -> Pair(v.first, LongArray(v.second.size) { v.second[it].toLong() }) }
    }

    /** forward.py subject_programs: the encode programs encode_tiling lists (the one `encode` untiled; staged: each
     *  one's stage programs), embed, and the blocks the residuals need, refused in one line naming what is missing. */
    private fun checkPrograms(where: String) {
        val names = HashSet<String>()
        val blocks = HashSet<Int>()
        val list = bundle.manifest.optJSONArray(BundleContract.PROGRAMS_FIELD)
        if (list != null) for (i in 0 until list.length()) {
            val p = list.getJSONObject(i)
            if (p.optString("runtime") != BundleContract.ET_RUNTIME) continue
            names.add(p.optString("name"))
            if (p.optString("name") == BundleContract.ET_BLOCK && !p.isNull(BundleContract.ET_BLOCK)) blocks.add(p.getInt(BundleContract.ET_BLOCK))
        }
        val missing = (tiling.allPrograms() + BundleContract.ET_EMBED).filter { it !in names }.distinct()
        require(missing.isEmpty()) { SubjectStage.noProgramsMessage(where, missing) }
        val need = if (spans.nBack > 0) 0 until spans.numBlocks else 0 until spans.nFront
        val absent = need.filter { it !in blocks }
        require(absent.isEmpty()) { "$where: no block program for blocks ${absent.take(5)} (the residuals need blocks 0..${need.last})" }
    }

    private fun condFor(photo: Int): Map<String, FloatTensor> {
        val row = if (bundle.perPhotoText) photo else 0
        cond?.let { if (it.first == row) return it.second }
        val m = LinkedHashMap<String, FloatTensor>()
        for ((k, t) in bundle.condFor(photo).toSortedMap()) {
            m[BundleContract.COND_PREFIX + k] = FloatTensor(t.shape.map { it.toInt() }.toIntArray(), t.floats())
        }
        cond = Pair(row, m)
        return m
    }

    /** subject.py CacheFreeEntries.photo: the bundle's normalised photo, [3, h, w] in [-1, 1], read once. */
    fun photo(index: Int): Triple<Int, Int, FloatArray> = photos.getOrPut(index) {
        require(index in photoFiles.indices) { "${bundle.root}: sample photo $index, the bundle holds ${photoFiles.size} photos" }
        PngRead.photo(File(bundle.root, photoFiles[index]))
    }

    /** The sample's entry as encode_entry gives it: {"x0", "<residual>.<part>", ...}. */
    fun encoded(s: Sample): LinkedHashMap<String, EncodedPart> {
        val x0 = if (x0Cache != null) {
            FloatTensor(shapes.getValue(BundleContract.X0_KEY), x0Cache.read(s.index).getValue(BundleContract.X0_KEY).floats())
        } else {
            val (h, w, px) = photo(s.photo)
            val planned = PlannedSample(s.index, s.photo, s.t.toDouble(), s.cropBox[0], s.cropBox[1], s.cropBox[2], s.noiseSeed)
            SubjectStage.x0(runner, px, h, w, planned, sMin, tiling)
        }
        val noise = FloatTensor(x0.shape, PortableRng.normal(s.noiseSeed, x0.data.size))
        val residuals = SubjectStage.residuals(runner, spans, x0, noise, s.t, condFor(s.photo))
        val tensors = LinkedHashMap<String, FloatTensor>()
        tensors[BundleContract.X0_KEY] = x0
        tensors.putAll(residuals)
        return CodecEncoder.encodeEntry(codec, tensors)
    }

    override fun read(s: Sample): Map<String, RawTensor> = encoded(s).mapValues { (_, p) ->
        RawTensor(ResidualCache.SAFETENSORS_DTYPE.getValue(p.dtype), LongArray(p.shape.size) { p.shape[it].toLong() },
                  ByteBuffer.wrap(p.bytes).order(ByteOrder.LITTLE_ENDIAN))
    }

    companion object {
        /** forward.py encode_tiling_of on a manifest: its record (`stages` absent: 1, an unsplit encoder), or (a bundle
         *  written before it) untiled. */
        fun encodeTilingOf(m: JSONObject, sMin: Int): EncodeTiling {
            val rec = m.optJSONObject(BundleContract.ENCODE_TILING_FIELD) ?: return EncodeTiling.untiled(sMin)
            val progs = rec.getJSONObject(BundleContract.ENCODE_TILING_PROGRAMS_FIELD)
            val programs = LinkedHashMap<String, String>()
            for (k in progs.keys()) programs[k] = progs.getString(k)
            val tiled = rec.optBoolean("tiled", false)
            val stages = rec.optInt(BundleContract.ENCODE_TILING_STAGES_FIELD, 1)
            return EncodeTiling(rec.getInt("tile_px"), rec.getInt("stride_px"), if (tiled) rec.getInt("scale") else 0, tiled,
                                programs, stages)
        }
    }
}

/**
 * The bundle's photos as runtime/photos.py read_png gives them (PIL convert("RGB"), / 127.5 - 1 in float32): an 8-bit,
 * non-interlaced PNG (grey, grey + alpha, RGB or RGBA: what Pillow and Bitmap.compress write) decoded here, the same
 * on the phone and the JVM: zlib (java.util.zip.Inflater) and the five PNG row filters; alpha dropped, grey repeated.
 */
object PngRead {
    private val SIGNATURE = byteArrayOf(0x89.toByte(), 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A)

    /** [3, h, w] float32 in [-1, 1]: (h, w, pixels). */
    fun photo(file: File): Triple<Int, Int, FloatArray> {
        val (h, w, rgb) = rgb(file)
        val out = FloatArray(3 * h * w)
        for (c in 0 until 3) for (y in 0 until h) for (x in 0 until w) {
            out[(c * h + y) * w + x] = (rgb[(y * w + x) * 3 + c].toInt() and 0xFF).toFloat() / 127.5f - 1f
        }
        return Triple(h, w, out)
    }

    /** (h, w, RGB bytes [h, w, 3]). */
    fun rgb(file: File): Triple<Int, Int, ByteArray> {
        val b = file.readBytes()
        require(b.size > 8 && b.copyOfRange(0, 8).contentEquals(SIGNATURE)) { "$file: not a PNG file" }
        fun u32(i: Int): Int = ((b[i].toInt() and 0xFF) shl 24) or ((b[i + 1].toInt() and 0xFF) shl 16) or
            ((b[i + 2].toInt() and 0xFF) shl 8) or (b[i + 3].toInt() and 0xFF)
        var at = 8
        var w = 0
        var h = 0
        var colorType = -1
        val idat = ByteArrayOutputStream()
        chunks@ while (at + 8 <= b.size) {
            val len = u32(at)
            val type = String(b, at + 4, 4, Charsets.US_ASCII)
            require(len >= 0 && at + 12 + len <= b.size) { "$file: truncated PNG ($type chunk)" }
            val d = at + 8
            if (type == "IHDR") {
                w = u32(d); h = u32(d + 4)
                val depth = b[d + 8].toInt(); colorType = b[d + 9].toInt(); val interlace = b[d + 12].toInt()
                require(depth == 8 && colorType in listOf(0, 2, 4, 6) && interlace == 0) {
                    "$file: a PNG of bit depth $depth, colour type $colorType, interlace $interlace: the bundle's photos " +
                        "are 8-bit grey / RGB (with or without alpha), not interlaced"
                }
            } else if (type == "IDAT") {
                idat.write(b, d, len)
            } else if (type == "IEND") {
                break@chunks
            }
            at = d + len + 4
        }
        require(colorType >= 0 && w > 0 && h > 0) { "$file: a PNG without its IHDR" }
        val channels = intArrayOf(1, 0, 3, 0, 2, 0, 4)[colorType]
        val stride = w * channels
        val raw = ByteArray(h * (stride + 1))
        val inflater = Inflater()
        try {
            inflater.setInput(idat.toByteArray())
            var n = 0
            while (n < raw.size) {
                val k = inflater.inflate(raw, n, raw.size - n)
                require(k > 0 || !(inflater.finished() || inflater.needsInput())) { "$file: truncated PNG image data" }
                n += k
            }
        } finally {
            inflater.end()
        }
        val px = ByteArray(h * stride)
        for (y in 0 until h) {
            val filter = raw[y * (stride + 1)].toInt()
            val src = y * (stride + 1) + 1
            val row = y * stride
            for (x in 0 until stride) {
                val r = raw[src + x].toInt() and 0xFF
                val a = if (x >= channels) px[row + x - channels].toInt() and 0xFF else 0
                val up = if (y > 0) px[row - stride + x].toInt() and 0xFF else 0
                val c = if (x >= channels && y > 0) px[row - stride + x - channels].toInt() and 0xFF else 0
                val v = when (filter) {
                    0 -> r
                    1 -> r + a
                    2 -> r + up
                    3 -> r + (a + up) / 2
                    4 -> r + paeth(a, up, c)
                    else -> throw IllegalArgumentException("$file: PNG row $y has filter $filter (corrupt)")
                }
                px[row + x] = v.toByte()
            }
        }
        val out = ByteArray(h * w * 3)
        for (q in 0 until h * w) for (c in 0 until 3) {
            out[q * 3 + c] = px[q * channels + if (channels >= 3) c else 0]
        }
        return Triple(h, w, out)
    }

    private fun paeth(a: Int, b: Int, c: Int): Int {
        val p = a + b - c
        val pa = Math.abs(p - a); val pb = Math.abs(p - b); val pc = Math.abs(p - c)
        return if (pa <= pb && pa <= pc) a else if (pb <= pc) b else c
    }
}
