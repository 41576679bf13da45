package org.ditskip.demo

import org.json.JSONObject
import java.io.File
import java.security.MessageDigest

/** One scheduled sample (schedule.json `samples` rows, fields in BundleContract.SAMPLE_FIELDS order). */
data class Sample(val index: Int, val photo: Int, val t: Float, val cropBox: IntArray, val noiseSeed: Long)

/** One program input as the manifest lists it (contract order). */
data class InputSpec(val name: String, val shape: LongArray, val dtype: String)

/** Where a sample's encoded cache entry ({"x0", "<residual>.<part>", ...}, coded as a stored cache holds it) comes
 *  from: the stored residual cache ([StoredEntries]), or, for an x0-only or cache-free bundle, computed at each step
 *  (CacheFreeEntries.kt, runtime/subject.py CacheFreeEntries). */
interface EntrySource {
    /** The entry's parts in layout order: name -> (contract dtype, shape). */
    val parts: Map<String, Pair<String, LongArray>>

    fun read(s: Sample): Map<String, RawTensor>
}

/** A stored bundle's entries: its residual cache, read entry by entry (SHA-256 checked). */
class StoredEntries(val cache: ResidualCache) : EntrySource {
    override val parts: Map<String, Pair<String, LongArray>>
        get() = cache.layout.mapValues { (_, p) -> Pair(p.dtype, p.shape) }

    override fun read(s: Sample): Map<String, RawTensor> = cache.read(s.index)
}

/**
 * A bundle as the device reads it, through the contract only (docs/bundle_contract.json): manifest, schedule, text
 * conditioning, residual cache index, and the ExecuTorch program section. Nothing here knows the model.
 * `subject_stage.cache_mode`: "stored" (the residual cache gives the entries), "x0-only" (the cache holds x0 alone) or
 * "cache-free" (no cache): those two compute each step's entry (CacheFreeEntries.kt), handed in with [useEntries]
 * before training; their entry inputs are checked against its layout then.
 */
class TrainingBundle(val root: File) {
    /** The manifest's own digest (its first line), checked against every byte after that line before any field is
     *  read (contract `bundle.manifest_digest`): an edited or corrupt manifest is refused. */
    val manifestSha256: String
    val manifest: JSONObject
    val samples: List<Sample>
    val steps: Int
    val gradAccum: Int
    val etSection: JSONObject
    val inputs: List<InputSpec>
    val trainable: Map<String, String>          // program parameter name -> LoRA file key
    /** The text conditioning as stored: one row (the prompt's), or with per-photo captions one row per photo. */
    val cond: Map<String, RawTensor>
    /** subject_stage.text_rows == per_photo: sample s trains with row s.photo of [cond] ([condFor]). */
    val perPhotoText: Boolean
    val cacheMode: String
    /** stored: the residual cache; x0-only: the cache of x0 alone; cache-free: none. */
    val cache: ResidualCache?
    /** The entries the training step takes: the stored cache's, or those handed in with [useEntries]. */
    var entries: EntrySource? = null
        private set

    init {
        val raw = File(root, BundleContract.MANIFEST_FILE).readBytes()
        val firstLine = raw.indexOf(0x0A.toByte())           // the first newline
        val head = if (firstLine > 0) String(raw, 0, firstLine + 1, Charsets.UTF_8) else ""
        val m = Regex("^\\{\"${BundleContract.MANIFEST_DIGEST_FIELD}\": \"([0-9a-f]{64})\",\n$").find(head)
        require(m != null) { "$root/manifest.json: first line does not carry ${BundleContract.MANIFEST_DIGEST_FIELD}" }
        manifestSha256 = m.groupValues[1]
        require(sha256Hex(raw.copyOfRange(firstLine + 1, raw.size)) == manifestSha256) {
            "$root/manifest.json: contents do not match ${BundleContract.MANIFEST_DIGEST_FIELD} (edited or corrupt)"
        }
        manifest = JSONObject(String(raw, Charsets.UTF_8))
        require(manifest.optString("format") == BundleContract.BUNDLE_FORMAT) {
            "${root}/manifest.json: format is ${manifest.optString("format")}, expected ${BundleContract.BUNDLE_FORMAT}"
        }
        require(manifest.optInt("format_version") == BundleContract.BUNDLE_FORMAT_VERSION) {
            "${root}/manifest.json: format_version ${manifest.optInt("format_version")} is not supported"
        }
        require(manifest.optString(BundleContract.BUNDLE_KIND_FIELD) != BundleContract.MODEL_BUNDLE_KIND) {
            "$root: a model bundle (no photos, no residual cache): run the subject stage on it first " +
                "(pick photos and tap Train: SubjectBundle.write, or python -m ditskip_edge.runtime personalize)"
        }
        val subject = manifest.getJSONObject("subject_stage")
        cacheMode = subject.optString("cache_mode", BundleContract.STORED_MODE)
        val modes = listOf(BundleContract.STORED_MODE, BundleContract.X0_ONLY_MODE, BundleContract.CACHE_FREE_MODE)
        require(cacheMode in modes) {
            "$root/manifest.json: subject_stage.cache_mode '$cacheMode', expected one of ${modes.joinToString(", ")} " +
                "(a bundle of another version: write it again with this version's subject stage)"
        }
        val schedule = JSONObject(File(root, subject.getString("schedule")).readText())
        val fields = schedule.getJSONArray("sample_fields")
        for (i in BundleContract.SAMPLE_FIELDS.indices) {
            require(fields.getString(i) == BundleContract.SAMPLE_FIELDS[i]) { "schedule.json: sample_fields changed" }
        }
        val rows = schedule.getJSONArray("samples")
        samples = (0 until rows.length()).map { k ->
            val r = rows.getJSONArray(k)
            val box = r.getJSONArray(3)
            Sample(r.getInt(0), r.getInt(1), r.getDouble(2).toFloat(), IntArray(3) { box.getInt(it) },
                   r.getLong(4))      // noise seeds are < 2^63: org.json parses them as Long
        }
        val config = schedule.getJSONObject("config")
        steps = config.getInt("steps")
        gradAccum = config.getInt("grad_accum")
        cond = Safetensors.read(File(root, subject.getString("text_conditioning")))
        val textRows = subject.optString(BundleContract.TEXT_ROWS_FIELD, BundleContract.SHARED_TEXT_ROWS)
        require(textRows == BundleContract.SHARED_TEXT_ROWS || textRows == BundleContract.PER_PHOTO_TEXT_ROWS) {
            "$root/manifest.json: subject_stage.${BundleContract.TEXT_ROWS_FIELD} '$textRows', expected " +
                "${BundleContract.SHARED_TEXT_ROWS} or ${BundleContract.PER_PHOTO_TEXT_ROWS}"
        }
        perPhotoText = textRows == BundleContract.PER_PHOTO_TEXT_ROWS
        val nRows = if (perPhotoText) subject.getJSONArray("photos").length().toLong() else 1L
        for ((k, t) in cond) require(t.shape.isNotEmpty() && t.shape[0] == nRows) {
            "$root: text conditioning $k has shape ${t.shape.toList()}, expected $nRows row(s) ($textRows)"
        }
        cache = if (cacheMode == BundleContract.CACHE_FREE_MODE || subject.isNull("cache")) null
                else ResidualCache(File(root, subject.getString("cache")))
        require(cache != null || cacheMode == BundleContract.CACHE_FREE_MODE) { "$root/manifest.json: a $cacheMode bundle without its cache (subject_stage.cache)" }
        if (cache != null) {
            require(cache.size == samples.size) { "${cache.dir}: ${cache.size} cache entries for ${samples.size} samples" }
            require(cacheMode != BundleContract.X0_ONLY_MODE || cache.layout.keys == setOf(BundleContract.X0_KEY)) {
                "$root: an ${BundleContract.X0_ONLY_MODE} bundle whose cache holds ${cache.layout.keys.sorted()}, not x0 alone"
            }
        }

        etSection = program(BundleContract.ET_TRAIN_STEP)
            ?: error("${root}/manifest.json: no ${BundleContract.ET_RUNTIME} ${BundleContract.ET_TRAIN_STEP} program (compile with --runtime executorch)")
        val specs = etSection.getJSONArray(BundleContract.ET_INPUTS_FIELD)
        inputs = (0 until specs.length()).map { i ->
            val s = specs.getJSONObject(i)
            val shape = s.getJSONArray("shape")
            InputSpec(s.getString("name"), LongArray(shape.length()) { shape.getLong(it) }, s.optString("dtype", "float32"))
        }
        checkInputOrder(inputs.map { it.name })
        if (cacheMode == BundleContract.STORED_MODE) useEntries(StoredEntries(cache!!))
        val tr = etSection.getJSONObject(BundleContract.ET_TRAINABLE_FIELD)
        trainable = tr.keys().asSequence().associateWith { tr.getString(it) }
    }

    /** The program file, bundle-relative in the manifest. */
    val programFile: File
        get() = File(root, etSection.getString(BundleContract.ET_PROGRAM_FIELD))

    /** The program's data file (its frozen weights, .ptd; the entry's `data` list), or null when the weights are
     *  inside the .pte. */
    val programDataFile: File?
        get() = etSection.optJSONArray(BundleContract.ET_DATA_FIELD)?.takeIf { it.length() > 0 }
            ?.let { File(root, it.getString(0)) }

    /** LoRA file keys and safetensors metadata as the compiler recorded them from diffusers' save_lora_weights. */
    val loraMetadata: Map<String, String>
        get() = manifest.optJSONObject(BundleContract.LORA_FILE_FIELD)?.optJSONObject("metadata")?.let { m ->
            m.keys().asSequence().associateWith { m.getString(it) } } ?: mapOf("format" to "pt")

    /** The first entry of manifest `programs` (a list) with this name and runtime "executorch". */
    fun program(name: String, match: (JSONObject) -> Boolean = { true }): JSONObject? {
        val list = manifest.optJSONArray(BundleContract.PROGRAMS_FIELD) ?: return null
        for (i in 0 until list.length()) {
            val p = list.getJSONObject(i)
            if (p.optString("name") == name && p.optString("runtime") == BundleContract.ET_RUNTIME && match(p)) return p
        }
        return null
    }

    /** The contract's order: x0, noise, t, cond.* sorted, entry.* sorted. Refuse a program that differs. */
    private fun checkInputOrder(names: List<String>) {
        val fixed = BundleContract.FIXED_INPUTS
        require(names.take(fixed.size) == fixed) { "program inputs start ${names.take(3)}, expected $fixed" }
        val condNames = names.filter { it.startsWith(BundleContract.COND_PREFIX) }
        val entryNames = names.filter { it.startsWith(BundleContract.ENTRY_PREFIX) }
        val expect = fixed + condNames.sorted() + entryNames.sorted()
        require(names == expect) { "program inputs $names are not in contract order $expect" }
    }

    /** The training step's entries from `source` (an x0-only or cache-free bundle: CacheFreeEntries), checked
     *  against the program's entry inputs first. */
    fun useEntries(source: EntrySource) {
        checkEntryInputs(source.parts)
        entries = source
    }

    /** The entries, or the one-line refusal of an x0-only / cache-free bundle given none. */
    fun requireEntries(): EntrySource = entries ?: throw IllegalStateException(
        "$root: a $cacheMode bundle computes each step's cache entry with its forward programs: give it its " +
            "CacheFreeEntries (TrainingBundle.useEntries) before training")

    /** entry.<part> inputs are exactly the cache layout's parts without x0, with the layout's dtype and shape; the
     *  other inputs are float32 (contract `step_inputs.dtype_rule`). */
    private fun checkEntryInputs(layout: Map<String, Pair<String, LongArray>>) {
        val parts = layout.keys.filter { it != BundleContract.X0_KEY }.sorted()
        val names = inputs.filter { it.name.startsWith(BundleContract.ENTRY_PREFIX) }
            .map { it.name.removePrefix(BundleContract.ENTRY_PREFIX) }
        require(names == parts) { "program entry inputs $names differ from the cache layout's parts $parts" }
        for (spec in inputs) {
            if (spec.name.startsWith(BundleContract.ENTRY_PREFIX)) {
                val p = layout.getValue(spec.name.removePrefix(BundleContract.ENTRY_PREFIX))
                require(spec.dtype == p.first && spec.shape.contentEquals(p.second)) {
                    "input ${spec.name}: program wants ${spec.dtype} ${spec.shape.toList()}, cache stores ${p.first} ${p.second.toList()}"
                }
            } else {
                require(spec.dtype == BundleContract.STEP_INPUT_DTYPE) { "input ${spec.name}: ${spec.dtype}, expected ${BundleContract.STEP_INPUT_DTYPE}" }
            }
        }
    }

    fun samplesForStep(step: Int): List<Sample> = samples.subList(step * gradAccum, (step + 1) * gradAccum)

    /** One sample's inputs in program order: x0 from the cache entry (or the device preprocessing), noise from the
     *  portable RNG, t, text conditioning, the cache entry's stored parts (SHA-256 checked, coded as stored; x0-only
     *  and cache-free: the entry computed now, coded as a stored cache would hold it). */
    fun stepInputs(s: Sample, x0Override: FloatArray? = null): List<Pair<InputSpec, Any>> {
        val entry = requireEntries().read(s)
        val x0 = x0Override ?: entry.getValue(BundleContract.X0_KEY).floats()
        return inputs.map { spec ->
            val value: Any = when {
                spec.name == "x0" -> x0
                spec.name == "noise" -> PortableRng.normal(s.noiseSeed, x0.size)
                spec.name == "t" -> floatArrayOf(s.t)
                spec.name.startsWith(BundleContract.COND_PREFIX) ->
                    condFor(s.photo).getValue(spec.name.removePrefix(BundleContract.COND_PREFIX))
                else -> entry.getValue(spec.name.removePrefix(BundleContract.ENTRY_PREFIX))
            }
            spec to value
        }
    }

    /** The text conditioning photo [photo]'s samples train with: [cond], or with per-photo captions its row. */
    fun condFor(photo: Int): Map<String, RawTensor> =
        if (perPhotoText) cond.mapValues { (_, t) -> t.row(photo) } else cond

    /** What a checkpoint belongs to (contract `checkpoint.identity`): this runtime, this program's files, this
     *  manifest (which covers the schedule, the cache codec, the LoRA spec and the optimizer). */
    fun checkpointIdentity(program: JSONObject): String {
        val files = manifest.getJSONObject("files")
        val paths = listOf(program.getString(BundleContract.ET_PROGRAM_FIELD)) +
            (program.optJSONArray(BundleContract.ET_DATA_FIELD)?.let { d -> (0 until d.length()).map { d.getString(it) } } ?: emptyList())
        val programSha = paths.joinToString("+") { files.getJSONObject(it).getString("sha256") }
        val text = "${BundleContract.CHECKPOINT_IDENTITY_PREFIX}\n${BundleContract.ET_RUNTIME}\n$programSha\n$manifestSha256"
        return sha256Hex(text.toByteArray(Charsets.UTF_8))
    }

    private fun sha256Hex(bytes: ByteArray): String =
        MessageDigest.getInstance("SHA-256").digest(bytes).joinToString("") { "%02x".format(it) }

    fun verifyFiles(progress: (String) -> Unit = {}) {
        val files = manifest.getJSONObject("files")
        for (rel in files.keys()) {
            progress(rel)
            val info = files.getJSONObject(rel)
            val f = File(root, rel)
            require(f.isFile) { "$f: listed in the manifest but missing" }
            require(f.length() == info.getLong("bytes")) { "$f: ${f.length()} bytes, manifest says ${info.getLong("bytes")}" }
            val md = MessageDigest.getInstance("SHA-256")
            f.inputStream().use { ins -> val buf = ByteArray(1 shl 20); while (true) { val n = ins.read(buf); if (n < 0) break; md.update(buf, 0, n) } }
            val hex = md.digest().joinToString("") { "%02x".format(it) }
            require(hex == info.getString("sha256")) { "$f: SHA-256 does not match the manifest" }
        }
    }
}
