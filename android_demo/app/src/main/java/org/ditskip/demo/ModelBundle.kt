package org.ditskip.demo

import org.json.JSONObject
import java.io.File
import java.security.MessageDigest

/** A photo as the subject stage takes it: file name, SHA-256 of the file's bytes, and its pixels normalised to the
 *  data resolution ([3, h, w] in [-1, 1], runtime/photos.py: short side Lanczos-resized to s_max when larger). */
class SubjectPhoto(val name: String, val sha256: String, val h: Int, val w: Int, val pixels: FloatArray)

/**
 * A model bundle (no photos) as the subject stage reads it (runtime/subject.py personalize, up to the residual cache):
 * the manifest, verified against its own digest, parsed with PyJson (so the model fields land in the cache identity
 * exactly as Python's json reads them), the schedule parameters, the plan, the codec, the entry shapes, the prompts.
 * [writeCache] computes the residual cache of the user's photos into `<work>/subject/cache`, resumable.
 * The subject bundle around it: SubjectBundle.kt. Not yet here: writing the x0-only and cache-free modes (training
 * them: CacheFreeEntries.kt).
 */
class ModelBundle(val root: File) {
    val manifestSha256: String
    val manifest: Map<String, Any?>
    private val manifestText: String

    init {
        val raw = File(root, BundleContract.MANIFEST_FILE).readBytes()
        val firstLine = raw.indexOf(0x0A.toByte())
        val head = if (firstLine > 0) String(raw, 0, firstLine + 1, Charsets.UTF_8) else ""
        val m = Regex("^\\{\"${BundleContract.MANIFEST_DIGEST_FIELD}\": \"([0-9a-f]{64})\",\n$").find(head)
        require(m != null) { "$root/manifest.json: first line does not carry ${BundleContract.MANIFEST_DIGEST_FIELD}" }
        manifestSha256 = m.groupValues[1]
        val hex = CacheWriter.hex(MessageDigest.getInstance("SHA-256").digest(raw.copyOfRange(firstLine + 1, raw.size)))
        require(hex == manifestSha256) { "$root/manifest.json: contents do not match ${BundleContract.MANIFEST_DIGEST_FIELD} (edited or corrupt)" }
        manifestText = String(raw, Charsets.UTF_8)
        manifest = obj(PyJson.parse(manifestText), "manifest")
        require(manifest[BundleContract.BUNDLE_KIND_FIELD] == BundleContract.MODEL_BUNDLE_KIND) {
            "$root is a subject bundle (it already has photos and a schedule): train it; the subject stage takes a " +
                "model bundle (ditskip-edge compile without --images)"
        }
    }

    private fun section(name: String): Map<String, Any?> = obj(manifest[name], name)

    @Suppress("UNCHECKED_CAST")
    private fun obj(v: Any?, what: String): Map<String, Any?> =
        v as? Map<String, Any?> ?: throw IllegalArgumentException("$root/manifest.json: field $what is missing or not an object")

    private fun int(m: Map<String, Any?>, k: String): Int = (m[k] as? Long)?.toInt()
        ?: throw IllegalArgumentException("$root/manifest.json: field $k is missing or not an integer")

    val spans: SkipSpans get() = section("plan").let { SkipSpans(int(it, "num_blocks"), int(it, "n_front"), int(it, "n_back")) }

    val scheduleConfig: ScheduleConfig get() = section("schedule").let {
        ScheduleConfig(int(it, "steps"), int(it, "grad_accum"), int(it, "s_min_px"), int(it, "s_max_px"),
                       int(it, "multiple_px"), it["seed"] as Long, it["t_sampling"] as String, it["dynamic_patches"] as Boolean)
    }

    val codecSpec: String get() = section("model_bundle")["cache_codec"] as? String
        ?: throw IllegalArgumentException("$root/manifest.json: field model_bundle.cache_codec is missing or not a string")

    val codec: CacheCodec get() = CacheCodec.parse(codecSpec)

    /** The manifest's `files`: bundle-relative path -> {sha256, bytes}. */
    val files: Map<String, Map<String, Any?>> get() = obj(manifest["files"], "files").mapValues { (k, v) -> obj(v, "files.$k") }

    /** bundle.py verify_files (what Bundle.open(verify=True) does): every listed file present, its size and SHA-256
     *  the manifest's. */
    fun verifyFiles() {
        for ((rel, info) in files) {
            val f = File(root, rel)
            require(f.isFile) { "$f: listed in the manifest but missing" }
            require(f.length() == (info["bytes"] as Number).toLong()) { "$f: ${f.length()} bytes, manifest says ${info["bytes"]}" }
            require(SubjectBundle.sha256(f) == info["sha256"]) { "$f: SHA-256 does not match the manifest (file changed or corrupt)" }
        }
    }

    /** The manifest's encode_tiling (forward.py encode_tiling_of): absent (a bundle written before it) = untiled,
     *  the one `encode` program on the whole s_min crop; its `stages` absent = 1 (an unsplit encoder). */
    val encodeTiling: EncodeTiling get() {
        val f = BundleContract.ENCODE_TILING_FIELD
        val rec = manifest[f] ?: return EncodeTiling.untiled(scheduleConfig.sMinPx)
        val m = obj(rec, f)
        val programs = LinkedHashMap<String, String>()
        for ((k, v) in obj(m[BundleContract.ENCODE_TILING_PROGRAMS_FIELD], "$f.${BundleContract.ENCODE_TILING_PROGRAMS_FIELD}")) {
            programs[k] = v as? String ?: throw IllegalArgumentException("$root/manifest.json: field $f.programs.$k is not a program name")
        }
        val tiled = m["tiled"] == true
        val stages = if (m.containsKey(BundleContract.ENCODE_TILING_STAGES_FIELD)) int(m, BundleContract.ENCODE_TILING_STAGES_FIELD) else 1
        return EncodeTiling(int(m, "tile_px"), int(m, "stride_px"), if (tiled) int(m, "scale") else 0, tiled, programs, stages)
    }

    val entryShapes: LinkedHashMap<String, IntArray> get() {
        val out = LinkedHashMap<String, IntArray>()
        for ((k, v) in obj(section("model_bundle")["entry_shapes"], "entry_shapes")) {
            out[k] = (v as List<*>).map { (it as Long).toInt() }.toIntArray()
        }
        return out
    }

    /** The prompts in order, each with its text conditioning file (bundle-relative). */
    val prompts: List<Pair<String, String>> get() = (section("model_bundle")["prompts"] as List<*>).map {
        val p = obj(it, "prompts"); Pair(p["prompt"] as String, p["text_conditioning"] as String)
    }

    @Suppress("UNCHECKED_CAST")
    private fun specs(p: Map<String, Any?>, field: String): LinkedHashMap<String, List<Any?>> {
        val out = LinkedHashMap<String, List<Any?>>()
        for (x in p[field] as? List<*> ?: emptyList<Any?>()) { val m = x as Map<String, Any?>; out[m["name"] as String] = m["shape"] as List<Any?> }
        return out
    }

    /**
     * subject.py check_programs, before any work: the bundle has the encode (every tile program encode_tiling lists;
     * staged: every stage program of each), embed and needed block programs, refused in one line naming the missing
     * (at most 4), and they are this manifest's model's: encode takes an s_min patch and gives entry_shapes' x0
     * (tiled: the tiles are those of tile_px every stride_px on the crop, each tile program takes its pixel tile and
     * gives its part of x0; staged: the first stage takes the patch, the last gives x0, each stage takes what the one
     * before gives), embed gives the streams
     * whose residuals the cache holds and takes the prompts' conditioning, every block takes what embed gives, a
     * train_step program takes this codec's entry.
     */
    fun checkPrograms(cond: Map<String, FloatTensor>) {
        val where = "$root/manifest.json"
        @Suppress("UNCHECKED_CAST")
        val all = (manifest[BundleContract.PROGRAMS_FIELD] as? List<*> ?: emptyList<Any?>()).map { it as Map<String, Any?> }
        val et = all.filter { it["runtime"] == BundleContract.ET_RUNTIME }
        val tiling = encodeTiling
        val byName = et.groupBy { it["name"] as? String }
        val missing = (tiling.allPrograms() + BundleContract.ET_EMBED).filter { it !in byName }.distinct()
        require(missing.isEmpty()) { SubjectStage.noProgramsMessage(where, missing) }
        val emb = byName.getValue(BundleContract.ET_EMBED)[0]
        val blocks = et.filter { it["name"] == BundleContract.ET_BLOCK }.associateBy { (it[BundleContract.ET_BLOCK] as Long).toInt() }
        val sp = spans
        val need = if (sp.nBack > 0) 0 until sp.numBlocks else 0 until sp.nFront
        val absent = need.filter { it !in blocks }
        require(absent.isEmpty()) { "$where: no block program for blocks ${absent.take(5)} (the residuals need blocks 0..${need.last})" }
        val shapes = entryShapes.mapValues { (_, v) -> v.map { it.toLong() } }
        val sMin = scheduleConfig.sMinPx.toLong()
        val x0Shape = shapes.getValue(BundleContract.X0_KEY)
        if (tiling.tiled) {
            val want = Tiling.tileShapes(sMin.toInt(), sMin.toInt(), tiling.tilePx, tiling.stridePx).map { Tiling.shapeKey(it.first, it.second) }
            require(tiling.programs.keys == want.toSet()) {
                "$where: ${BundleContract.ENCODE_TILING_FIELD} lists tiles ${tiling.programs.keys.sorted()}, not those of " +
                    "${tiling.tilePx}-px tiles every ${tiling.stridePx} px on the $sMin-px crop"
            }
        }
        for (key in tiling.programs.keys) {
            val chain = tiling.chainOf(key)!!.map { byName.getValue(it)[0] }
            val enc = chain.first(); val last = chain.last()
            val (th, tw) = key.split("x").map { it.toLong() }
            val wantX0 = x0Shape.take(2) + listOf(th * x0Shape[2] / sMin, tw * x0Shape[3] / sMin)
            val patch = specs(enc, "inputs")["patch"]
            require(patch != null && patch.drop(2) == listOf(th, tw) && specs(last, "outputs")[BundleContract.X0_KEY] == wantX0 &&
                    (tiling.tiled || th == sMin && tw == sMin)) {
                "$where: ${enc["path"]} is not this model's encoder (patch/x0 shapes differ from the $key px " +
                    "${if (tiling.tiled) "tile" else "s_min crop"} and entry_shapes x0 $x0Shape)"
            }
            for ((before, stage) in chain.zipWithNext()) {        // a staged encoder: each stage takes what the one before gives
                val gives = specs(before, "outputs").values.firstOrNull(); val takes = specs(stage, "inputs").values.firstOrNull()
                require(gives == takes) {
                    "$where: encoder stage ${stage["path"]} takes $takes, ${before["path"]} gives $gives: the stages are not one encoder's"
                }
            }
        }
        val streams = specs(emb, "outputs")
        for ((name, shape) in shapes) {
            val stream = when {
                name.startsWith("front.") -> SubjectStage.STREAM_PREFIX + name.removePrefix("front.")
                name == "back.${SubjectStage.IMG_STREAM}" -> SubjectStage.STREAM_PREFIX + SubjectStage.IMG_STREAM
                else -> null
            } ?: continue
            require(streams[stream] == shape) { "$where: ${emb["path"]} is not this model's (its streams $streams do not give the residual $name $shape)" }
        }
        val flow = streams.filterKeys { it.startsWith(SubjectStage.STREAM_PREFIX) || it.startsWith(SubjectStage.CTX_PREFIX) }
        for ((i, p) in blocks.toSortedMap()) {
            require(specs(p, "inputs") == flow) { "$where: block program ${p["path"]} (block $i) takes ${specs(p, "inputs")}, not what ${emb["path"]} gives: it is another model's" }
        }
        val wantCond = cond.mapValues { (_, t) -> t.shape.map { it.toLong() } }
        val gotCond = specs(emb, "inputs").filterKeys { it.startsWith(BundleContract.COND_PREFIX) }
        require(wantCond == gotCond) { "$where: ${emb["path"]} takes text conditioning $gotCond, the bundle's prompts give $wantCond" }
        val layout = codec.parts(entryShapes).keys
        val expect = BundleContract.FIXED_INPUTS + cond.keys.sorted() +
            layout.filter { it != BundleContract.X0_KEY }.sorted().map { BundleContract.ENTRY_PREFIX + it }
        for (p in all.filter { it["name"] == BundleContract.ET_TRAIN_STEP }) {
            val names = specs(p, "inputs").keys.toList()
            require(names == expect) { "$where: training program ${p["path"]} takes ${names.take(6)}.., not this codec's entry ${expect.take(6)}.." }
        }
    }

    /** subject.py run_identity: what an interrupted run must match to be continued. */
    fun runIdentity(photos: List<SubjectPhoto>, prompt: String, mode: String): String {
        val text = PyJson.dumps(linkedMapOf("model_bundle" to manifestSha256, "photos" to photos.map { listOf(it.name, it.sha256) },
                                            "prompt" to prompt, "cache_mode" to mode), sortKeys = true)
        return CacheWriter.hex(MessageDigest.getInstance("SHA-256").digest(text.toByteArray(Charsets.UTF_8)))
    }

    /**
     * The residual cache of `photos` (sorted by file name, normalised) for prompt `promptIndex`, written to
     * `<work>/subject/cache` entry by entry (stored mode): a run killed and started again with the same inputs
     * continues after its last journalled entry. Returns the index, or null when stopped after `stopAfter` new entries.
     * `runner` defaults to the bundle's programs through ExecuTorch (one loaded at a time), made after the checks.
     * A tiled encode (encode_tiling) runs the tile programs on the crop's tiles and blends them (SubjectStage.x0).
     */
    fun writeCache(photos: List<SubjectPhoto>, promptIndex: Int, work: File, stopAfter: Int? = null,
                   runner: ForwardRunner? = null, progress: (Int, Int) -> Unit = { _, _ -> }): Map<String, Any?>? {
        val minPhotos = int(section("model_bundle"), "min_photos")
        require(photos.size >= minPhotos) { "${photos.size} photos: this model bundle needs at least $minPhotos" }
        val cfg = scheduleConfig
        val sizes = photos.map { intArrayOf(it.h, it.w) }
        val samples = Schedule.make(cfg, sizes)
        val spans = spans
        val schedule = SubjectStage.scheduleJson(cfg, samples, photos.map { it.name }, sizes)
        val identity = SubjectStage.cacheIdentity(section("model"), spans, schedule)
        val (prompt, condFile) = prompts[promptIndex]
        val cond = LinkedHashMap<String, FloatTensor>()
        for ((k, t) in Safetensors.read(File(root, condFile)).toSortedMap()) {
            cond[BundleContract.COND_PREFIX + k] = FloatTensor(t.shape.map { it.toInt() }.toIntArray(), t.floats())
        }
        checkPrograms(cond)                                              // refused before any work
        val run = runner ?: EtForwardRunner(root, JSONObject(manifestText))
        val writer = CacheWriter(File(work, "subject/cache"), identity, codec, entryShapes, resumable = true,
                                 run = runIdentity(photos, prompt, BundleContract.STORED_MODE))
        return SubjectStage.writeCache(writer, samples, photos.map { Triple(it.h, it.w, it.pixels) }, run, spans,
                                       cfg.sMinPx, cond, stopAfter, encodeTiling, progress)
    }
}
