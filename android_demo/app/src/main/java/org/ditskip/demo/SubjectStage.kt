package org.ditskip.demo

import org.json.JSONArray
import org.json.JSONObject
import org.pytorch.executorch.EValue
import org.pytorch.executorch.Module
import org.pytorch.executorch.Tensor
import java.io.File

/** A subject-stage program: `encode` (or a tiled encode's `encode.<h>x<w>`, or a staged encoder's `<that>.s<k>`),
 *  `embed`, or `block` with its index (manifest ProgramEntry.block). */
data class ProgramKey(val name: String, val block: Int = -1)

/** Runs one forward-only program on named float32 inputs and gives its named outputs (runtime/forward.py's
 *  ProgramRunner). The app's is [EtForwardRunner]; the JVM check uses a stand-in with simple deterministic programs. */
interface ForwardRunner {
    fun run(program: ProgramKey, inputs: Map<String, FloatTensor>): Map<String, FloatTensor>

    /** Drop the program kept loaded between calls, if any: a tiled encode's tile program (a staged encoder's stage
     *  program) stays loaded while the tiles of its shape run (forward.py encoder(key, stage)), until another encode
     *  program or this (SubjectStage.encodeShape calls it after each stage). */
    fun release() {}
}

/**
 * The manifest's `encode_tiling` (runtime/forward.py encode_tiling_of): the subject stage's encoder on pixel tiles of
 * the s_min crop (compile --encode-tile-px), `programs` naming each pixel tile shape's program ("HxW" ->
 * "encode.HxW"); a bundle without the record is untiled: the one `encode` program on the whole crop. `stages`
 * (compile --encode-stages; absent or 1: unsplit): each `programs` value <name> stands for the chain of the encoder's
 * stage programs "<name>.s0" .. "<name>.s<stages-1>" ([chain]).
 */
class EncodeTiling(val tilePx: Int, val stridePx: Int, val scale: Int, val tiled: Boolean,
                   val programs: LinkedHashMap<String, String>, val stages: Int = 1) {
    /** The programs of the encode of pixel tile shape `key` ("HxW"), in the order they run; null: no such tile. */
    fun chainOf(key: String): List<String>? = programs[key]?.let { stageNames(it, stages) }

    /** Every program the encode needs: each tile shape's chain, in `programs`' order. */
    fun allPrograms(): List<String> = programs.values.flatMap { stageNames(it, stages) }

    companion object {
        fun untiled(sMin: Int): EncodeTiling =
            EncodeTiling(sMin, sMin, 0, false, linkedMapOf(Tiling.shapeKey(sMin, sMin) to BundleContract.ET_ENCODE))

        /** runtime/contract.py encode_stage_names: `name` itself, or with the encoder split into `stages` programs
         *  "<name>.s0" .. "<name>.s<stages-1>" (stage 0 takes "patch", each later one the previous "features", the
         *  last gives "x0"). */
        fun stageNames(name: String, stages: Int): List<String> =
            if (stages <= 1) listOf(name) else (0 until stages).map { "$name.s$it" }
    }
}

/** The skip plan's spans (manifest `plan`): blocks 0..nFront-1 skipped in front, the last nBack skipped at the back. */
data class SkipSpans(val numBlocks: Int, val nFront: Int, val nBack: Int)

/**
 * The subject stage on the phone (issue 15), the twin of ditskip_edge/runtime/subject.py `write_cache` and
 * runtime/forward.py: per scheduled sample, the crop (Patches) -> `encode` -> x0; noise = PortableRng(noise seed);
 * `embed`, then the block programs in order, one at a time -> the front / back residuals (float32, forward.py's
 * arithmetic) -> the bundle's codec (CodecEncoder) -> a resumable CacheWriter. The residual arithmetic is here, the
 * programs behind [ForwardRunner], so the JVM check runs this file unchanged.
 */
object SubjectStage {
    const val STREAM_PREFIX = "stream."        // runtime/contract.py STREAM_PREFIX, CTX_PREFIX (not in the contract JSON)
    const val CTX_PREFIX = "ctx."
    const val IMG_STREAM = "img"
    const val PATCH_INPUT = "patch"            // the encode's input; a staged encoder's between stages (contract.py)
    const val FEATURES = "features"

    /** photo [3, h, w] in [-1, 1] + the sample's crop box -> x0 (the encode program on the crop resized to s_min;
     *  tiled: forward.py x0, the tile programs on its pixel tiles, all tiles of one shape in one call
     *  (Tiling.encodeTiledShapes), the latent tiles blended as encode_tiled does; staged: [encodeShape], one stage's
     *  program loaded at a time). */
    fun x0(runner: ForwardRunner, photo: FloatArray, h: Int, w: Int, s: PlannedSample, sMin: Int,
           tiling: EncodeTiling? = null): FloatTensor {
        val patch = FloatTensor(intArrayOf(1, 3, sMin, sMin), Patches.crop(photo, h, w, s.x0, s.y0, s.side, sMin))
        val t = tiling ?: EncodeTiling.untiled(sMin)
        try {
            val x0 = if (!t.tiled) encodeShape(runner, t, listOf(patch.data), sMin, sMin)[0]
                     else Tiling.encodeTiledShapes(patch.data, sMin, sMin, t.tilePx, t.stridePx, t.scale) { parts, th, tw ->
                         encodeShape(runner, t, parts, th, tw) }
            return FloatTensor(intArrayOf(1, x0.c, x0.h, x0.w), x0.data)
        } finally {
            runner.release()                                              // forward.py: no encode program kept
        }
    }

    /** forward.py encode_shape: the pixel tiles [3, th, tw] of one shape -> their latents, each program of the shape's
     *  chain (the tile program, or the encoder's stage programs) run on every tile, then released before the next
     *  stage's loads (one encode program loaded at a time, besides every tile's features between stages). */
    fun encodeShape(runner: ForwardRunner, tiling: EncodeTiling, parts: List<FloatArray>, th: Int, tw: Int): List<Tiling.Tile> {
        val key = Tiling.shapeKey(th, tw)
        val chain = tiling.chainOf(key)
            ?: throw IllegalArgumentException("${BundleContract.ENCODE_TILING_FIELD}: no program for a ${th}x$tw-px tile")
        var xs = parts.map { FloatTensor(intArrayOf(1, 3, th, tw), it) }
        for ((k, name) in chain.withIndex()) {
            val input = if (k == 0) PATCH_INPUT else FEATURES
            val output = if (k == chain.size - 1) BundleContract.X0_KEY else FEATURES
            xs = xs.map { x -> runner.run(ProgramKey(name), mapOf(input to x))[output]
                ?: throw IllegalArgumentException("the $name program gives no $output") }
            runner.release()                                              // this stage done: its program dropped
        }
        return xs.map { Tiling.Tile(it.shape[1], it.shape[2], it.shape[3], it.data) }
    }

    /** The one-line refusal of a bundle without the subject programs it lists (forward.py subject_programs: the first
     *  4 missing named). */
    fun noProgramsMessage(where: String, missing: List<String>): String =
        "$where: no ${missing.take(4).joinToString(", ")} program: this bundle cannot run the subject stage (compile it " +
            "without --images: a model bundle)"

    /** One sample's residuals {"front.<s>" every stream, "back.img"}: forward.py ForwardPrograms.residuals. */
    fun residuals(runner: ForwardRunner, spans: SkipSpans, x0: FloatTensor, noise: FloatTensor, t: Float,
                  cond: Map<String, FloatTensor>): LinkedHashMap<String, FloatTensor> {
        val inputs = LinkedHashMap<String, FloatTensor>()
        inputs[BundleContract.FIXED_INPUTS[0]] = x0
        inputs[BundleContract.FIXED_INPUTS[1]] = noise
        inputs[BundleContract.FIXED_INPUTS[2]] = FloatTensor(intArrayOf(1), floatArrayOf(t))
        inputs.putAll(cond)
        val out = runner.run(ProgramKey(BundleContract.ET_EMBED), inputs)
        var streams: Map<String, FloatTensor> = out.filterKeys { it.startsWith(STREAM_PREFIX) }
        val ctx = out.filterKeys { it.startsWith(CTX_PREFIX) }
        val embedded = streams
        val res = LinkedHashMap<String, FloatTensor>()
        val backStart = spans.numBlocks - spans.nBack
        val last = if (spans.nBack > 0) spans.numBlocks else spans.nFront
        var keptOut: FloatTensor? = null
        for (i in 0 until last) {
            if (i == spans.nFront && spans.nFront > 0) front(streams, embedded, res)
            if (i == backStart) keptOut = streams.getValue(STREAM_PREFIX + IMG_STREAM)
            streams = runner.run(ProgramKey(BundleContract.ET_BLOCK, i), streams + ctx)
        }
        if (spans.nFront > 0 && last == spans.nFront) front(streams, embedded, res)    // no back span
        if (spans.nBack > 0) res["back.$IMG_STREAM"] = minus(streams.getValue(STREAM_PREFIX + IMG_STREAM), keptOut!!)
        return res
    }

    private fun front(streams: Map<String, FloatTensor>, embedded: Map<String, FloatTensor>, res: MutableMap<String, FloatTensor>) {
        for ((k, v) in streams) res["front." + k.removePrefix(STREAM_PREFIX)] = minus(v, embedded.getValue(k))
    }

    private fun minus(a: FloatTensor, b: FloatTensor): FloatTensor {
        require(a.shape.contentEquals(b.shape)) { "stream shapes ${a.shape.toList()} and ${b.shape.toList()} differ" }
        return FloatTensor(a.shape, FloatArray(a.data.size) { a.data[it] - b.data[it] })
    }

    /** Photos (normalised [3, h, w] in [-1, 1], the schedule's order) + schedule -> the residual cache, entry by entry,
     *  resumable (subject.py write_cache, stored mode): returns the index, or null when stopped after `stopAfter` new
     *  entries (tests: as a killed run would). `progress(done, total)` after each entry. */
    fun writeCache(writer: CacheWriter, samples: List<PlannedSample>, photos: List<Triple<Int, Int, FloatArray>>,
                   runner: ForwardRunner, spans: SkipSpans, sMin: Int, cond: Map<String, FloatTensor>,
                   stopAfter: Int? = null, encodeTiling: EncodeTiling? = null,
                   progress: (Int, Int) -> Unit = { _, _ -> }): Map<String, Any?>? {
        val residualNames = writer.shapes.keys.filter { it != BundleContract.X0_KEY }
        writer.codec.requireEncodable(residualNames)                                 // lowrank: refused before any work
        var computed = 0
        for (s in samples.drop(writer.nextIndex)) {
            val (h, w, px) = photos[s.photo]
            val x0 = x0(runner, px, h, w, s, sMin, encodeTiling)
            val noise = FloatTensor(x0.shape, PortableRng.normal(s.noiseSeed, x0.data.size))
            val res = residuals(runner, spans, x0, noise, s.t.toFloat(), cond)
            addEntry(writer, s.index, x0, res)
            computed += 1
            progress(writer.nextIndex, samples.size)
            if (stopAfter != null && computed >= stopAfter && writer.nextIndex < samples.size) {
                writer.close()
                return null
            }
        }
        return writer.finish(mapOf("rel_error" to relErrorSummary(writer.extras)))
    }

    /** Encode x0 + one sample's residuals with the writer's codec and append them, with each residual's coding error
     *  (runtime/codecs.py relative_error) as the entry's journalled extra, as subject.py does. */
    fun addEntry(writer: CacheWriter, index: Int, x0: FloatTensor, residuals: Map<String, FloatTensor>) {
        val tensors = LinkedHashMap<String, FloatTensor>()
        tensors[BundleContract.X0_KEY] = x0
        tensors.putAll(residuals)
        val parts = CodecEncoder.encodeEntry(writer.codec, tensors)
        val relError = LinkedHashMap<String, Any?>()
        for ((name, d) in residuals) {
            val c = writer.codec.forName(name)
            val mine = c.parts(d.shape).keys.associate { it to parts.getValue("$name.$it") }
            relError[name] = CodecEncoder.relativeError(CodecEncoder.decodeTensor(c, mine, d.shape), d.data)
        }
        writer.add(index, parts, mapOf("rel_error" to relError))
    }

    /** {residual: {"mean", "max"}} over the entries' journalled coding errors (subject.py). */
    fun relErrorSummary(extras: List<Map<String, Any?>>): Map<String, Any?> {
        val errors = LinkedHashMap<String, MutableList<Double>>()
        for (extra in extras) {
            @Suppress("UNCHECKED_CAST")
            val rel = extra["rel_error"] as? Map<String, Any?> ?: continue
            for ((k, v) in rel) errors.getOrPut(k) { ArrayList() }.add((v as Number).toDouble())
        }
        val out = LinkedHashMap<String, Any?>()
        for ((k, v) in errors) {
            var sum = 0.0
            for (x in v) sum += x
            out[k] = linkedMapOf("mean" to sum / v.size, "max" to v.max())
        }
        return out
    }

    /** The schedule as schedule.json / the cache identity hold it (runtime/schedule.py Schedule.to_json). */
    fun scheduleJson(cfg: ScheduleConfig, samples: List<PlannedSample>, photoNames: List<String>,
                     sizesHw: List<IntArray>): Map<String, Any?> {
        var clamped = 0L
        if (cfg.dynamicPatches) for (s in samples) {
            val hw = sizesHw[s.photo]
            if (Schedule.cropSide(s.t, cfg.sMinPx, cfg.sMaxPx, cfg.multiplePx, minOf(hw[0], hw[1])).second) clamped += 1
        }
        val config = linkedMapOf<String, Any?>("steps" to cfg.steps.toLong(), "grad_accum" to cfg.gradAccum.toLong(),
            "s_min_px" to cfg.sMinPx.toLong(), "s_max_px" to cfg.sMaxPx.toLong(), "multiple_px" to cfg.multiplePx.toLong(),
            "seed" to cfg.seed, "t_sampling" to cfg.tSampling, "dynamic_patches" to cfg.dynamicPatches)
        return linkedMapOf("algorithm" to BundleContract.SCHEDULE_ALGORITHM.toLong(), "config" to config,
            "photo_names" to photoNames, "clamped_samples" to clamped,
            "samples" to samples.map { listOf(it.index.toLong(), it.photo.toLong(), it.t,
                                              listOf(it.x0.toLong(), it.y0.toLong(), it.side.toLong()), it.noiseSeed) },
            "sample_fields" to BundleContract.SAMPLE_FIELDS)
    }

    /** What the cache is computed for (runtime/bundle.py cache_identity): model name, transformer config, plan, schedule. */
    fun cacheIdentity(model: Map<String, Any?>, spans: SkipSpans, schedule: Map<String, Any?>): Map<String, Any?> =
        linkedMapOf("model" to model["name"], "transformer_config" to model["transformer_config"],
                    "plan" to listOf(spans.numBlocks.toLong(), spans.nFront.toLong(), spans.nBack.toLong()),
                    "schedule" to schedule)
}

/**
 * The model bundle's encode / embed / block programs with ExecuTorch's Java `Module`, one loaded at a time (loaded
 * for its call and destroyed after it, forward.py's default `keep_blocks=False`; a tiled encode's tile program, or a
 * staged encoder's stage program ("encode[.<h>x<w>].s<k>"), stays loaded for the tiles of its shape, until the next
 * one or [release]): inputs in the manifest entry's order,
 * looked up by name and checked against its shapes; outputs named by its `outputs`. ExecuTorch's Java `Module` takes
 * no data file, so a program whose weights are in a .ptd (`data`, compile --weights mapped) is refused with one line.
 */
class EtForwardRunner(private val root: File, manifest: JSONObject) : ForwardRunner {
    private val entries = HashMap<ProgramKey, JSONObject>()
    private var held: ProgramKey? = null                                  // the tile program kept loaded, and its Module
    private var heldModule: Module? = null

    init {
        val list = manifest.getJSONArray(BundleContract.PROGRAMS_FIELD)
        for (i in 0 until list.length()) {
            val p = list.getJSONObject(i)
            if (p.optString("runtime") != BundleContract.ET_RUNTIME) continue
            val name = p.optString("name")
            if (name != BundleContract.ET_ENCODE && !isTile(name) && name != BundleContract.ET_EMBED &&
                name != BundleContract.ET_BLOCK) continue
            val key = if (name == BundleContract.ET_BLOCK) ProgramKey(name, p.getInt(BundleContract.ET_BLOCK)) else ProgramKey(name)
            val data = p.optJSONArray(BundleContract.ET_DATA_FIELD)
            require(data == null || data.length() == 0) {
                "$root/manifest.json: program ${p.getString(BundleContract.ET_PROGRAM_FIELD)} keeps its weights in " +
                    "${data!!.getString(0)}; ExecuTorch's Java Module cannot load a data file: compile the model bundle " +
                    "with --weights resident for this app"
            }
            entries[key] = p
        }
        // the encode programs encode_tiling lists (absent: the one `encode`; staged: each one's stage programs),
        // refused in one line naming the missing (forward.py subject_programs: at most 4)
        val rec = manifest.optJSONObject(BundleContract.ENCODE_TILING_FIELD)
        val tiles = rec?.optJSONObject(BundleContract.ENCODE_TILING_PROGRAMS_FIELD)
        val stages = rec?.optInt(BundleContract.ENCODE_TILING_STAGES_FIELD, 1) ?: 1
        val encoders = if (tiles == null) listOf(BundleContract.ET_ENCODE) else tiles.keys().asSequence().map { tiles.getString(it) }.toList()
        val missing = (encoders.flatMap { EncodeTiling.stageNames(it, stages) } + BundleContract.ET_EMBED)
            .filter { ProgramKey(it) !in entries }.distinct()
        require(missing.isEmpty()) { SubjectStage.noProgramsMessage("$root/manifest.json", missing) }
    }

    private fun isTile(name: String): Boolean = name.startsWith(BundleContract.ET_ENCODE + ".")

    fun has(key: ProgramKey): Boolean = key in entries

    override fun run(program: ProgramKey, inputs: Map<String, FloatTensor>): Map<String, FloatTensor> {
        val p = entries[program] ?: error("$root/manifest.json: no ${program.name} program ${if (program.block >= 0) "for block ${program.block}" else ""}")
        val path = File(root, p.getString(BundleContract.ET_PROGRAM_FIELD)).absolutePath
        val specs = p.getJSONArray(BundleContract.ET_INPUTS_FIELD)
        val args = (0 until specs.length()).map { i ->
            val spec = specs.getJSONObject(i)
            val name = spec.getString("name")
            val t = inputs[name] ?: error("$path: input $name has no source")
            val shape = shapeOf(spec.getJSONArray("shape"))
            require(shape.map { it.toInt() } == t.shape.toList()) { "$path: input $name has shape ${t.shape.toList()}, the program expects ${shape.toList()}" }
            EValue.from(Tensor.fromBlob(t.data, shape))
        }
        if (held != null && held != program) release()                  // another tile shape, or another program
        val module = heldModule ?: Module.load(path)
        if (isTile(program.name)) { held = program; heldModule = module }
        try {
            val outs = module.forward(*args.toTypedArray())
            val outSpecs = p.getJSONArray("outputs")
            require(outs.size == outSpecs.length()) { "$path: ${outs.size} outputs, the manifest lists ${outSpecs.length()}" }
            val res = LinkedHashMap<String, FloatTensor>()
            for (i in outs.indices) {
                val spec = outSpecs.getJSONObject(i)
                val shape = shapeOf(spec.getJSONArray("shape")).map { it.toInt() }.toIntArray()
                res[spec.getString("name")] = FloatTensor(shape, outs[i].toTensor().dataAsFloatArray)
            }
            return res
        } finally {
            if (module !== heldModule) module.destroy()
        }
    }

    override fun release() {
        heldModule?.destroy()
        held = null; heldModule = null
    }

    private fun shapeOf(a: JSONArray): LongArray = LongArray(a.length()) { a.getLong(it) }
}
