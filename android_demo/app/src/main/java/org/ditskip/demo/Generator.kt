package org.ditskip.demo

import org.json.JSONObject
import org.pytorch.executorch.EValue
import org.pytorch.executorch.Module
import org.pytorch.executorch.Tensor
import java.io.File
import java.nio.ByteBuffer
import java.nio.ByteOrder
import java.nio.MappedByteBuffer
import java.nio.channels.FileChannel

/**
 * Generation on the phone after training, line for line ditskip_edge/runtime/generation.py over the bundle's
 * generation programs (manifest `generation` + the gen_* / decode / text_encoder program entries):
 *
 *   cond = text(prompt), uncond = text("")          HashText (built-in tiny models) | Wordpiece + text_encoder.pte |
 *                                                   a pipeline's encoders in order: each one's tokenizer.json (HfTokenizer)
 *                                                   + its program (FLUX: CLIP -> pooled, T5 -> txt; SANA: Gemma-2 -> txt,
 *                                                   txt_mask), each program loaded once and run once per branch
 *   x    = PortableRng.normal(seed, latent_shape)
 *   branches: uncond, cond (cond alone at guidance 1); every program at batch 1, once per branch
 *   for each sigma: values[b] = gen_embed(x, t, b's conditioning)
 *                   for each block in order, each branch b: values[b] += gen_block.<kind>(values[b], block weights)
 *                   v_b = gen_head(values[b]);  x += (sigma_next - sigma) (v_u + g (v_c - v_u))
 *   image = clip(decode(x) * 0.5 + 0.5, 0, 1)        [H, W, 3] row-major, the caller shows it
 *           decode: decode.<h>x<w> per latent tile, the tiles blended as diffusers' tiled_decode (Tiling.kt)
 *
 * A program's inputs are found by name among the values computed so far; `w.<state>` inputs are the block's
 * weights: direct buffers over the memory-mapped weights file (the merged LoRA'd linears from the file merged
 * after training), handed to Tensor.fromBlob without a copy on the Java side.
 */
class Generator(private val root: File, manifest: JSONObject, precision: String? = null) {
    private val gen = manifest.getJSONObject(BundleContract.GEN_FIELD)
    private val arch = manifest.getJSONObject("model").getString("arch")
    private val loraRecord = manifest.getJSONObject(BundleContract.LORA_FILE_FIELD)
    val precision: String = precision ?: gen.getJSONArray("precisions").getString(0)
    private val text = gen.getJSONObject("text")
    private val sampler = gen.getJSONObject("sampler")
    private val latentShape = gen.getJSONArray("latent_shape").let { a -> LongArray(a.length()) { a.getLong(it) } }
    private val programs = HashMap<String, JSONObject>()
    private val textKind = text.optString("kind")
    /** A pipeline's encoders in order (generation.text.encoders): program, role, tokenizer (file, max_len, pad_id,
     *  limits_prompt, preprocess). */
    private val encoders: List<JSONObject> =
        text.optJSONArray("encoders")?.let { a -> (0 until a.length()).map { a.getJSONObject(it) } } ?: emptyList()
    /** The text encoder programs, in the order they run (none for hash text). */
    private val textPrograms: List<String> = when (textKind) {
        "pipeline" -> encoders.map { it.getString("program") }
        "minilm" -> listOf(BundleContract.GEN_TEXT_ENCODER)
        else -> emptyList()
    }
    private val wordpiece: Wordpiece? by lazy { text.optJSONObject("tokenizer")?.let {
        Wordpiece.fromFile(File(root, it.getString("vocab")), it.getInt("max_len")) } }
    private val hfTokenizers = HashMap<String, HfTokenizer>()      // program -> its tokenizer, read on first use

    init {
        require(gen.optInt("format_version") == BundleContract.GEN_FORMAT_VERSION) {
            "generation part format ${gen.optInt("format_version")}, this app reads ${BundleContract.GEN_FORMAT_VERSION}: recompile with --generation" }
        require(text.optString("kind") in BundleContract.GEN_APP_TEXT_KINDS) {
            "generation text encoders of kind '${text.optString("kind")}': this app tokenizes ${BundleContract.GEN_APP_TEXT_KINDS.joinToString(", ")} only (generate with python -m ditskip_edge.runtime generate)" }
        val list = manifest.getJSONArray(BundleContract.PROGRAMS_FIELD)
        for (i in 0 until list.length()) {
            val p = list.getJSONObject(i)
            val name = p.getString("name")
            val shared = name in textPrograms || name.startsWith(BundleContract.GEN_DECODE_PREFIX)
            if (p.getString("runtime") == BundleContract.ET_RUNTIME && (shared || p.getString(BundleContract.ET_PRECISION_FIELD) == this.precision)) programs[name] = p
        }
    }

    /** (tokens the prompt needs, tokens the encoder takes, what a token is): generation refuses a longer prompt. For a
     *  pipeline, the encoder that limits the prompt (T5, Gemma-2: FLUX's CLIP truncates at 77 tokens as FluxPipeline
     *  does). */
    fun countTokens(prompt: String): Triple<Int, Int, String> = when (textKind) {
        "pipeline" -> {
            val e = encoders.firstOrNull { it.getJSONObject("tokenizer").getBoolean("limits_prompt") }
                ?: error("generation.text.encoders: no encoder has tokenizer.limits_prompt (recompile with --generation)")
            val tk = e.getJSONObject("tokenizer")
            Triple(hfTokenizer(e).countTokens(HfTokenizer.preprocess(prompt, tk.getString("preprocess"))), tk.getInt("max_len"),
                   "${e.getString("role")} tokens incl. special tokens")
        }
        "minilm" -> Triple(wordpiece!!.countTokens(prompt), text.getInt("seq_len"), "WordPiece tokens incl. [CLS] [SEP]")
        else -> Triple(HashText.words(prompt).size, text.getInt("seq_len"), "words")
    }

    fun checkPrompt(prompt: String) {
        require(prompt.isNotBlank()) { "the prompt is empty: describe the picture" }
        val (n, limit, unit) = countTokens(prompt)
        require(n <= limit) { "the prompt has $n $unit; the text encoder takes at most $limit: shorten it" }
    }

    private fun hfTokenizer(encoder: JSONObject): HfTokenizer = hfTokenizers.getOrPut(encoder.getString("program")) {
        val tk = encoder.getJSONObject("tokenizer")
        HfTokenizer.fromFile(File(root, tk.getString("file")), tk.getInt("max_len"), tk.getInt("pad_id"))
    }

    /** (input_ids, attention_mask) of a prompt for one text encoder program: WordPiece (MiniLM), or the encoder's
     *  tokenizer.json after its preprocessing (a pipeline). */
    private fun tokenize(program: String, prompt: String): Pair<LongArray, LongArray> {
        val e = encoders.firstOrNull { it.getString("program") == program } ?: return wordpiece!!.encode(prompt)
        return hfTokenizer(e).encode(HfTokenizer.preprocess(prompt, e.getJSONObject("tokenizer").getString("preprocess")))
    }

    private fun load(name: String): Pair<Module, JSONObject> {
        val p = programs[name] ?: error("no $name program at ${precision} in the bundle (compile with --generation)")
        return Module.load(File(root, p.getString(BundleContract.ET_PROGRAM_FIELD)).absolutePath) to p
    }

    private fun run(program: Pair<Module, JSONObject>, value: (String, String, LongArray) -> Tensor): Map<String, Tensor> {
        val (module, p) = program
        val specs = p.getJSONArray(BundleContract.ET_INPUTS_FIELD)
        val inputs = (0 until specs.length()).map { i ->
            val s = specs.getJSONObject(i); val sh = s.getJSONArray("shape")
            EValue.from(value(s.getString("name"), s.getString("dtype"), LongArray(sh.length()) { sh.getLong(it) }))
        }
        val outs = module.forward(*inputs.toTypedArray())
        val names = p.getJSONArray("outputs")
        return (0 until names.length()).associate { names.getJSONObject(it).getString("name") to outs[it].toTensor() }
    }

    /** cond.* of each branch's prompt (uncond: the empty prompt), batch 1: hash text, or the text encoder programs in
     *  order, each loaded once and run once per branch, its outputs merged into the branch's conditioning. */
    private fun conditioning(branches: List<String>, prompt: String): Map<String, MutableMap<String, Pair<LongArray, FloatArray>>> {
        val conds = branches.associateWith { HashMap<String, Pair<LongArray, FloatArray>>() }
        fun promptOf(b: String) = if (b == "uncond") "" else prompt
        if (textPrograms.isEmpty()) {
            for (b in branches) conds.getValue(b).putAll(
                HashText.encode(promptOf(b), arch, text.getInt("seq_len"), text.getInt("dim"), text.optInt("pooled_dim")))
            return conds
        }
        for (name in textPrograms) {
            val program = load(name)
            try {
                for (b in branches) {
                    val (ids, mask) = tokenize(name, promptOf(b))
                    val out = run(program) { input, _, shape -> when (input) {
                        "input_ids" -> Tensor.fromBlob(ids, shape)
                        "attention_mask" -> Tensor.fromBlob(mask, shape)
                        else -> error("text encoder $name: input $input is neither input_ids nor attention_mask")
                    } }
                    for ((k, t) in out) conds.getValue(b)[k] = t.shape() to t.dataAsFloatArray
                }
            } finally {
                program.first.destroy()
            }
        }
        return conds
    }

    fun generate(prompt: String, seed: Long, steps: Int, guidance: Float, mergedLora: File?,
                 onStep: (Int, Int) -> Unit = { _, _ -> }): FloatArray {
        checkPrompt(prompt)
        val base = MappedWeights(File(root, gen.getJSONObject("weights").getString(precision)))
        val merged = mergedLora?.let { MappedWeights(it) }
        val branches = if (guidance == 1f) listOf("cond") else listOf("uncond", "cond")
        val conds = conditioning(branches, prompt)
        val condKeys = gen.getJSONArray("cond_keys").let { a -> (0 until a.length()).map { a.getString(it) } }
        if ("guidance" in condKeys) conds.values.forEach {
            it[BundleContract.COND_PREFIX + "guidance"] = longArrayOf(1) to floatArrayOf(gen.getDouble("guidance_embeds").toFloat()) }
        val numel = latentShape.fold(1L) { a, b -> a * b }.toInt()
        val x = PortableRng.normal(seed, numel)
        val sig = Sampler.sigmas(steps, sampler.getDouble("shift").toFloat(), sampler.getBoolean("use_dynamic_shifting"),
                                 if (sampler.isNull("mu")) null else sampler.getDouble("mu"), sampler.getString("time_shift_type"))
        // one program loaded at a time (each holds its own planned arena), as runtime/generation.py Programs
        var current: Pair<String, Pair<Module, JSONObject>>? = null
        fun program(name: String): Pair<Module, JSONObject> {
            current?.let { if (it.first == name) return it.second; it.second.first.destroy() }
            return load(name).also { current = name to it }
        }
        val order = gen.getJSONArray("blocks")
        try {
            for (i in 0 until steps) {
                val values = branches.associateWith { b -> HashMap(run(program(BundleContract.GEN_EMBED)) { name, _, shape -> when (name) {
                    "x" -> Tensor.fromBlob(x, shape)
                    "t" -> Tensor.fromBlob(floatArrayOf(sig[i]), shape)
                    else -> Tensor.fromBlob(conds.getValue(b).getValue(name).second, shape)
                } }) }
                for (k in 0 until order.length()) {
                    val blockName = order.getJSONObject(k).getString("name")
                    val kind = order.getJSONObject(k).getString("kind")
                    for (b in branches) {
                        val own = values.getValue(b)
                        own.putAll(run(program(BundleContract.GEN_BLOCK_PREFIX + kind)) { name, dtype, shape ->
                            if (name.startsWith(BundleContract.GEN_WEIGHT_PREFIX)) {
                                val key = "$blockName.${name.removePrefix(BundleContract.GEN_WEIGHT_PREFIX)}"
                                (merged?.takeIf { key in it } ?: base).tensor(key, dtype, shape)
                            } else own.getValue(name)
                        })
                    }
                }
                val v = branches.associateWith { b ->
                    run(program(BundleContract.GEN_HEAD)) { name, _, _ -> values.getValue(b).getValue(name) }.getValue("v").dataAsFloatArray }
                Sampler.guidedEulerStep(x, v["uncond"], v.getValue("cond"), guidance, sig[i], sig[i + 1])
                onStep(i + 1, steps)
            }
        } finally {
            current?.second?.first?.destroy()
        }
        val image = decode(x)
        val chw = image.data
        val (h, w) = image.h to image.w
        return FloatArray(h * w * 3) { k -> val p = k / 3; val ch = k % 3
            (chw[ch * h * w + p] * 0.5f + 0.5f).coerceIn(0f, 1f) }
    }

    /** latents -> image [3, H, W]: the decode program per latent tile (one tile unless the bundle was compiled with
     *  --decode-tile-px), its `w.<state>` inputs from the mapped decoder weights, the tiles blended (Tiling). */
    private fun decode(x: FloatArray): Tiling.Tile {
        val dec = gen.getJSONObject(BundleContract.GEN_DECODE_FIELD)
        val weights = if (dec.isNull("weights")) null else MappedWeights(File(root, dec.getString("weights")))
        val prefix = dec.getString("weight_prefix")
        val names = dec.getJSONObject("programs")
        var current: Pair<String, Pair<Module, JSONObject>>? = null
        try {
            return Tiling.decodeTiled(x, latentShape[1].toInt(), latentShape[2].toInt(), latentShape[3].toInt(),
                                      dec.getInt("tile_latent"), dec.getInt("stride_latent"), dec.getInt("scale")) { tile, th, tw ->
                val name = names.getString(Tiling.shapeKey(th, tw))
                val program = current?.takeIf { it.first == name }?.second
                    ?: load(name).also { current?.second?.first?.destroy(); current = name to it }
                val out = run(program) { n, dtype, shape ->
                    if (n.startsWith(BundleContract.GEN_WEIGHT_PREFIX))
                        weights!!.tensor("$prefix.${n.removePrefix(BundleContract.GEN_WEIGHT_PREFIX)}", dtype, shape)
                    else Tensor.fromBlob(tile, shape) }.getValue("image")
                val sh = out.shape()
                Tiling.Tile(sh[1].toInt(), sh[2].toInt(), sh[3].toInt(), out.dataAsFloatArray)
            }
        } finally {
            current?.second?.first?.destroy()
        }
    }

    /** The LoRA'd linears merged at the weights' bit width into `out` (once after training): the bundle's LoRA only
     *  (the manifest's lora_file keys and metadata; shapes that fit the frozen weights). */
    fun mergeLora(lora: File, out: File): File {
        val tensors = Safetensors.read(lora)
        val keys = loraRecord.getJSONArray("keys").let { a -> (0 until a.length()).map { a.getString(it) }.toSet() }
        require(tensors.keys == keys) { "$lora: a LoRA for another model or plan (its keys are not this bundle's)" }
        val meta = loraRecord.getJSONObject("metadata")
        require(Safetensors.metadata(lora) == meta.keys().asSequence().associateWith { meta.getString(it) }) {
            "$lora: its metadata (rank, alpha, targets) differs from this bundle's: a LoRA for another plan" }
        val base = MappedWeights(File(root, gen.getJSONObject("weights").getString(precision)))
        val scale = gen.getDouble("lora_scale").toFloat()
        val merged = LinkedHashMap<String, Triple<String, LongArray, ByteArray>>()
        for (module in keys.map { it.substringBeforeLast(".lora_") }.toSortedSet()) {
            val a = tensors.getValue("$module.lora_A.weight"); val b = tensors.getValue("$module.lora_B.weight")
            val name = module.removePrefix(BundleContract.LORA_KEY_PREFIX)
            val states = listOf("weight", "w_codes", "w_scale", "w_packed").filter { "$name.$it" in base }
                .associateWith { base.raw("$name.$it") }
            require(states.isNotEmpty()) { "$lora: $name is not a linear of this model" }
            val o = (states["weight"] ?: states["w_codes"] ?: states.getValue("w_packed")).shape[0]
            require(b.shape[0] == o) { "$lora: $module.lora_B has ${b.shape[0]} rows, the frozen weight $o: another model" }
            for ((s, t) in LoraMerge.merge(states, a.floats(), b.floats(), a.shape[0].toInt(), scale, gen.getInt("group_size"))) merged["$name.$s"] = t
        }
        Safetensors.writeRaw(out, merged, mapOf("format" to "ditskip-edge-merged-lora", "precision" to precision))
        return out
    }
}

/** A safetensors file mapped once; tensors are direct-buffer views of it (nothing read until the runtime reads). */
class MappedWeights(file: File) {
    private val map: MappedByteBuffer
    private val entries = HashMap<String, JSONObject>()
    private val base: Int

    init {
        val ch = FileChannel.open(file.toPath())
        map = try { ch.map(FileChannel.MapMode.READ_ONLY, 0, ch.size()) } finally { ch.close() }
        map.order(ByteOrder.LITTLE_ENDIAN)
        val n = map.getLong(0).toInt()
        val hb = ByteArray(n); map.position(8); map.get(hb); map.position(0)
        val header = JSONObject(String(hb, Charsets.UTF_8))
        for (k in header.keys()) if (k != "__metadata__") entries[k] = header.getJSONObject(k)
        base = 8 + n
    }

    operator fun contains(key: String): Boolean = key in entries

    private fun slice(key: String): ByteBuffer {
        val offs = entries.getValue(key).getJSONArray("data_offsets")
        return map.duplicate().apply { position(base + offs.getLong(0).toInt()); limit(base + offs.getLong(1).toInt()) }
            .slice().order(ByteOrder.nativeOrder())           // phones are little-endian: the file's byte order
    }

    fun raw(key: String): RawTensor {
        val e = entries.getValue(key); val sh = e.getJSONArray("shape")
        return RawTensor(e.getString("dtype"), LongArray(sh.length()) { sh.getLong(it) }, slice(key).order(ByteOrder.LITTLE_ENDIAN))
    }

    fun tensor(key: String, dtype: String, shape: LongArray): Tensor = when (dtype) {
        "float32" -> Tensor.fromBlob(slice(key).asFloatBuffer(), shape)
        "int8" -> Tensor.fromBlob(slice(key), shape)
        "uint8" -> Tensor.fromBlobUnsigned(slice(key), shape)
        else -> error("weight $key: dtype $dtype is not float32 / int8 / uint8")
    }
}
