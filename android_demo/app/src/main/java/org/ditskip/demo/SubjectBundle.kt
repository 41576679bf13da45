package org.ditskip.demo

import java.io.File
import java.io.FileInputStream
import java.math.BigDecimal
import java.math.RoundingMode
import java.nio.file.Files
import java.nio.file.StandardCopyOption
import java.security.MessageDigest

/** Writes an 8-bit RGB image (`rgb` [h, w, 3], row-major) as a PNG file. The app's is Bitmap.compress(PNG); the JVM
 *  check's is javax.imageio. PNG bytes differ between encoders: readers compare the decoded pixels. */
interface PngWriter {
    fun write(rgb: ByteArray, h: Int, w: Int, out: File)
}

/**
 * The subject bundle around the residual cache: runtime/subject.py `personalize` / `_write_subject_bundle` and
 * runtime/bundle.py `BundleWriter`, stored mode. Into the working folder `.<name>.partial` beside `out`: the model
 * bundle's files (hard-linked, copied where linking fails), `subject/photos/NNN.png` (the normalised photos),
 * `subject/schedule.json`, `subject/text_conditioning.safetensors` (the prompt's, linked), `subject/cache/`
 * (ModelBundle.writeCache, resumable), then the manifest (the model bundle's kept fields, `bundle_kind`,
 * `subject_stage`, every file's SHA-256 and size, its own digest on the first line), written last; the folder is
 * renamed to `out` at the end. An error removes the working folder (nothing at `out`); a killed run leaves it, and
 * the next run with the same inputs continues its cache (a working folder of other inputs is refused, and kept).
 */
object SubjectBundle {
    const val PHOTOS_DIR = "subject/photos"
    const val SCHEDULE_FILE = "subject/schedule.json"
    const val TEXT_FILE = "subject/text_conditioning.safetensors"
    const val CACHE_DIR = "subject/cache"
    const val SUBJECT_BUNDLE_KIND = "subject"

    /** subject.py subject_manifest: the model bundle's fields a subject bundle keeps, in this order. */
    val KEPT_FIELDS = listOf("created_by", "model", "plan", "lora", "optimizer", "model_stage", "lora_file", "schedule",
                             "programs", "generation", "encode_tiling")

    fun workDirFor(out: File): File = File(out.absoluteFile.parentFile, ".${out.name}.partial")

    /** photos.py to_uint8: [3, h, w] in [-1, 1] -> [h, w, 3] uint8, round((clip(v) + 1) * 127.5) in float32, half to even. */
    fun toUint8(pixels: FloatArray, h: Int, w: Int): ByteArray {
        val out = ByteArray(3 * h * w)
        for (c in 0 until 3) for (y in 0 until h) for (x in 0 until w) {
            val v = (Math.min(1f, Math.max(-1f, pixels[(c * h + y) * w + x])) + 1f) * 127.5f
            out[(y * w + x) * 3 + c] = Math.rint(v.toDouble()).toInt().toByte()
        }
        return out
    }

    /**
     * The subject stage (stored mode): model bundle + photos (sorted by file name, normalised: PhotoNormalise) +
     * prompt -> the subject bundle at `out`. Returns its manifest (without the digest), or null when stopped after
     * `stopAfter` new cache entries (tests: the working folder stays, as a killed run leaves it).
     */
    fun write(model: ModelBundle, photos: List<SubjectPhoto>, promptIndex: Int, out: File, png: PngWriter,
              overwrite: Boolean = false, resume: Boolean = true, stopAfter: Int? = null, runner: ForwardRunner? = null,
              progress: (Int, Int) -> Unit = { _, _ -> }): Map<String, Any?>? {
        require(!out.exists() || overwrite) { "$out already exists: choose another output folder or allow overwriting" }
        require(!out.exists() || out.isDirectory) { "$out exists and is not a folder" }
        model.verifyFiles()                                          // Bundle.open(verify=True): before any work
        val (prompt, promptRel) = model.prompts[promptIndex]
        val identity = model.runIdentity(photos, prompt, BundleContract.STORED_MODE)
        val work = workDirFor(out)
        val journal = File(work, "$CACHE_DIR/${CacheWriter.JOURNAL}")
        checkPartial(work, journal, identity, resume)
        work.mkdirs()
        val t0 = System.nanoTime()
        var stopped = false
        try {
            val known = LinkedHashMap<String, Map<String, Any?>>()
            for ((rel, info) in model.files) link(File(model.root, rel), work, rel, info, known)
            photos.forEachIndexed { i, p ->
                png.write(toUint8(p.pixels, p.h, p.w), p.h, p.w, place(work, photoRel(i)))
            }
            val cfg = model.scheduleConfig
            val sizes = photos.map { intArrayOf(it.h, it.w) }
            val samples = Schedule.make(cfg, sizes)
            val schedule = SubjectStage.scheduleJson(cfg, samples, photos.map { it.name }, sizes)
            place(work, SCHEDULE_FILE).writeText(PyJson.dumps(schedule), Charsets.UTF_8)     // json.dumps(to_json())
            link(File(model.root, promptRel), work, TEXT_FILE, model.files[promptRel], known)

            var computed = 0
            val tCache = System.nanoTime()
            val index = if (runner != null)
                model.writeCache(photos, promptIndex, work, stopAfter, runner) { d, n -> computed += 1; progress(d, n) }
            else model.writeCache(photos, promptIndex, work, stopAfter) { d, n -> computed += 1; progress(d, n) }
            if (index == null) { stopped = true; return null }
            val cacheSeconds = (System.nanoTime() - tCache) / 1e9

            val stage = LinkedHashMap<String, Any?>()
            stage["schedule"] = SCHEDULE_FILE
            stage["text_conditioning"] = TEXT_FILE
            stage["photos"] = photos.indices.map { photoRel(it) }
            stage["prompt"] = prompt
            stage["num_samples"] = samples.size.toLong()
            stage["clamped_crops"] = schedule["clamped_samples"]
            stage["entry_shapes"] = LinkedHashMap<String, Any?>().also { m ->
                for ((k, v) in model.entryShapes) m[k] = v.map { it.toLong() } }
            stage["cache_codec"] = model.codecSpec
            stage["cache_mode"] = BundleContract.STORED_MODE
            stage["computed_by"] = "device"
            stage["model_bundle_sha256"] = model.manifestSha256
            stage["run_identity"] = identity
            stage["cache"] = CACHE_DIR
            stage["cache_rel_error"] = index["rel_error"]
            stage["cache_entry_bytes"] = index["entry_bytes"]
            stage["resumed_entries"] = (samples.size - computed).toLong()
            stage["computed_entries"] = computed.toLong()
            stage["seconds_per_sample"] = round(cacheSeconds / Math.max(computed, 1), 4)
            stage["seconds"] = round((System.nanoTime() - t0) / 1e9, 3)

            val manifest = LinkedHashMap<String, Any?>()
            manifest["format"] = BundleContract.BUNDLE_FORMAT
            manifest["format_version"] = BundleContract.BUNDLE_FORMAT_VERSION.toLong()
            for (k in KEPT_FIELDS) if (model.manifest.containsKey(k)) manifest[k] = model.manifest[k]
            manifest[BundleContract.BUNDLE_KIND_FIELD] = SUBJECT_BUNDLE_KIND
            manifest["subject_stage"] = stage
            manifest["files"] = fileList(work, known)
            File(work, BundleContract.MANIFEST_FILE).writeBytes(manifestBytes(manifest))
            if (out.exists()) out.deleteRecursively()
            Files.move(work.toPath(), out.toPath(), StandardCopyOption.ATOMIC_MOVE)
            return manifest
        } finally {
            if (!stopped && work.exists()) work.deleteRecursively()     // an error: nothing half-written is left
        }
    }

    /** subject.py check_partial: an interrupted run's working folder is continued when its cache journal was written
     *  for the same inputs (run identity), refused with one line (and kept) otherwise; removed when it holds no
     *  journal or `resume` is false. */
    private fun checkPartial(work: File, journal: File, identity: String, resume: Boolean) {
        if (!work.exists()) return
        var run: Any? = null
        if (resume && journal.isFile) {
            run = try {
                @Suppress("UNCHECKED_CAST")
                val head = PyJson.parse(journal.bufferedReader().use { it.readLine() ?: "" }) as Map<String, Any?>
                @Suppress("UNCHECKED_CAST")
                (head["header"] as Map<String, Any?>)["run"]
            } catch (e: Exception) { null }
        }
        require(run == null || run == identity) {
            "$work: an interrupted subject stage for other inputs (another model bundle, other photos, prompt or mode): " +
                "delete it or start over without resuming"
        }
        if (run == null) work.deleteRecursively()
    }

    fun photoRel(i: Int): String = "$PHOTOS_DIR/${String.format("%03d", i)}.png"

    /** bundle.py manifest_bytes: json.dumps(manifest, indent=1) with a first line carrying the SHA-256 of the rest. */
    fun manifestBytes(manifest: Map<String, Any?>): ByteArray {
        val rest = PyJson.dumps(manifest.filterKeys { it != BundleContract.MANIFEST_DIGEST_FIELD }, indent = 1).substring(2)
        val bytes = rest.toByteArray(Charsets.UTF_8)
        val digest = CacheWriter.hex(MessageDigest.getInstance("SHA-256").digest(bytes))
        return "{\"${BundleContract.MANIFEST_DIGEST_FIELD}\": \"$digest\",\n".toByteArray(Charsets.UTF_8) + bytes
    }

    fun sha256(f: File): String {
        val md = MessageDigest.getInstance("SHA-256")
        FileInputStream(f).use { s ->
            val buf = ByteArray(1 shl 20)
            while (true) { val n = s.read(buf); if (n < 0) break; md.update(buf, 0, n) }
        }
        return CacheWriter.hex(md.digest())
    }

    private fun place(root: File, rel: String): File = File(root, rel).also { it.parentFile.mkdirs() }

    /** BundleWriter.link: a hard link (a copy where linking fails); `info` ({sha256, bytes}) spares hashing it again. */
    private fun link(src: File, root: File, rel: String, info: Map<String, Any?>?, known: MutableMap<String, Map<String, Any?>>) {
        val dst = place(root, rel)
        if (dst.exists()) dst.delete()
        try {
            Files.createLink(dst.toPath(), src.toPath())
        } catch (e: Exception) {
            Files.copy(src.toPath(), dst.toPath())
        }
        if (info != null) known[rel] = linkedMapOf("sha256" to info["sha256"], "bytes" to (info["bytes"] as Number).toLong())
    }

    /** BundleWriter's commit: every file under root, sorted as Python sorts paths (component by component), with its
     *  SHA-256 and size (a linked file's from its manifest when the size agrees). */
    private fun fileList(root: File, known: Map<String, Map<String, Any?>>): Map<String, Any?> {
        val rels = root.walkTopDown().filter { it.isFile }.map { it.relativeTo(root).invariantSeparatorsPath }.toList()
        val sorted = rels.sortedWith(Comparator { a, b ->
            val pa = a.split("/"); val pb = b.split("/")
            var i = 0
            while (i < pa.size && i < pb.size && pa[i] == pb[i]) i++
            when {
                i < pa.size && i < pb.size -> pa[i].compareTo(pb[i])
                else -> pa.size - pb.size
            }
        })
        val files = LinkedHashMap<String, Any?>()
        for (rel in sorted) {
            val f = File(root, rel)
            val k = known[rel]
            files[rel] = if (k != null && f.length() == k["bytes"]) LinkedHashMap(k)
                         else linkedMapOf("sha256" to sha256(f), "bytes" to f.length())
        }
        return files
    }

    /** Python's round(x, digits) for the timing fields. */
    private fun round(x: Double, digits: Int): Double = BigDecimal(x).setScale(digits, RoundingMode.HALF_EVEN).toDouble()
}
