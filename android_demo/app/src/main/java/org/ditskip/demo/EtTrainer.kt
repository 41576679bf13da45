package org.ditskip.demo

import org.json.JSONArray
import org.pytorch.executorch.EValue
import org.pytorch.executorch.Tensor
import org.pytorch.executorch.training.TrainingModule
import java.io.File
import java.nio.FloatBuffer

/**
 * The training loop on the phone, line for line the runtime package's loop (ditskip_edge/runtime/loop.py) with the
 * ExecuTorch step adapter (runtime/executorch.py):
 *
 *   module = TrainingModule.load(bundle/<program path>, bundle/<program data[0]>)   // .pte + its weights' .ptd
 *   one forward-backward on the first sample: the named parameters exist only after it      (adapter.prepare)
 *   resume from RUN/checkpoint.safetensors if its identity is this run's                     (runtime/checkpoint.py)
 *   entries: the residual cache's (stored), or CacheFreeEntries' (x0-only, cache-free: computed each step with the
 *            forward programs, coded as a stored cache holds them; TrainingBundle.useEntries)
 *   for step in start until steps:                       // one optimizer step = grad_accum scheduled samples
 *       for sample in schedule[step]: loss = module.executeForwardBackward("forward", inputs); grads += g / accum
 *       adamw.step(params, grads)                          // params are the runtime's arena, updated in place
 *       checkpoint (atomic) ; report loss + memory
 *   write the LoRA (the manifest's lora_file keys, via the program's `trainable` map)
 */
class EtTrainer(private val bundle: TrainingBundle, private val runDir: File) {
    data class Progress(val step: Int, val total: Int, val loss: Float, val memory: MemoryProbe.Reading)

    private val checkpointFile = File(runDir, BundleContract.CHECKPOINT_FILE)
    private val identity = bundle.checkpointIdentity(bundle.etSection)
    val losses = ArrayList<Float>()
    val memoryTimeline = ArrayList<Pair<Int, MemoryProbe.Reading>>()
    private val paramShapes = HashMap<String, LongArray>()

    fun train(x0ForSample: ((Sample) -> FloatArray?)? = null, onProgress: (Progress) -> Unit): File {
        check(PortableRng.selfCheck()) { "portable RNG does not reproduce the host's noise: refusing to train" }
        bundle.requireEntries()        // x0-only / cache-free: CacheFreeEntries handed in (useEntries), else one line
        runDir.mkdirs()
        val o = bundle.manifest.getJSONObject("optimizer")
        val betas = o.getJSONArray("betas")
        val lr = o.getDouble("lr")
        val adamw = AdamW(lr, betas.getDouble(0), betas.getDouble(1), o.getDouble("eps"), o.getDouble("weight_decay"))
        val lrSchedule = o.optString(BundleContract.LR_SCHEDULE_FIELD, "constant")      // absent: bundles before v8
        AdamW.lrAt(lr, lrSchedule, 0, bundle.steps)                 // an unknown schedule: refused before any work
        val data = bundle.programDataFile
        // the .ptd with the frozen weights when the program has one (ExecuTorch's Java API reads it with a
        // FileDataLoader: the weights land in anonymous memory here, unlike the Python runtime and the iOS app,
        // which map it; docs/bundle_contract.md, known gaps)
        val module = if (data != null) TrainingModule.load(bundle.programFile.absolutePath, data.absolutePath)
                     else TrainingModule.load(bundle.programFile.absolutePath)
        try {
            fun forwardBackward(s: Sample): Float {
                val inputs = bundle.stepInputs(s, x0ForSample?.invoke(s)).map { (spec, v) -> EValue.from(tensorOf(spec, v)) }
                val out = module.executeForwardBackward(BundleContract.ET_METHOD, *inputs.toTypedArray())
                return out[0].toTensor().dataAsFloatArray[0]
            }
            forwardBackward(bundle.samples[0])          // prepare: the named parameters exist only after a first call
            val named = module.namedParameters(BundleContract.ET_METHOD)
            paramShapes.putAll(named.mapValues { (_, t) -> t.shape() })
            val params = named.mapValues { (_, t) -> t.getRawDataBuffer() as FloatBuffer }
            val start = resume(params, adamw)
            for (step in start until bundle.steps) {
                val accum = bundle.gradAccum
                val grads = HashMap<String, FloatArray>()
                var stepLoss = 0f
                for (s in bundle.samplesForStep(step)) {
                    stepLoss += forwardBackward(s) / accum
                    for ((name, g) in module.namedGradients(BundleContract.ET_METHOD)) {
                        val ga = g.dataAsFloatArray
                        val acc = grads.getOrPut(name) { FloatArray(ga.size) }
                        for (i in ga.indices) acc[i] += ga[i] / accum
                    }
                }
                adamw.lr = AdamW.lrAt(lr, lrSchedule, step, bundle.steps)
                adamw.step(params, grads)
                losses.add(stepLoss)
                saveCheckpoint(params, adamw, step + 1)
                val mem = MemoryProbe.read()
                memoryTimeline.add(step + 1 to mem)
                onProgress(Progress(step + 1, bundle.steps, stepLoss, mem))
            }
            return saveLora(params)
        } finally {
            module.close()
        }
    }

    /** A program input with the spec's dtype and shape: float32 (x0, noise, t, cond.*), or a cache part as stored
     *  (contract `step_inputs.dtype_rule`: int8 / uint8 codes and fp16 bytes, float32 scales and x0). */
    private fun tensorOf(spec: InputSpec, v: Any): Tensor {
        val numel = spec.shape.fold(1L) { a, b -> a * b }
        if (v is RawTensor) {
            require(v.shape.contentEquals(spec.shape)) { "input ${spec.name}: shape ${v.shape.toList()}, program expects ${spec.shape.toList()}" }
            require(ResidualCache.SAFETENSORS_DTYPE[spec.dtype] == v.dtype || (spec.dtype == "float32" && v.dtype == "F32")) {
                "input ${spec.name}: program wants ${spec.dtype}, stored as ${v.dtype}"
            }
        }
        return when (spec.dtype) {
            "float32" -> {
                val values = when (v) {
                    is FloatArray -> v
                    is RawTensor -> v.floats()
                    else -> error("input ${spec.name}: unexpected value")
                }
                require(values.size.toLong() == numel) { "input ${spec.name}: ${values.size} values for shape ${spec.shape.toList()}" }
                Tensor.fromBlob(values, spec.shape)
            }
            "int8" -> Tensor.fromBlob((v as RawTensor).rawBytes(), spec.shape)
            "uint8" -> Tensor.fromBlobUnsigned((v as RawTensor).rawBytes(), spec.shape)
            else -> error("input ${spec.name}: dtype ${spec.dtype} is not one of the contract's part dtypes " +
                          "${BundleContract.CACHE_PART_DTYPES} (bundle compiled for another contract)")
        }
    }

    /** Load the run folder's checkpoint into the runtime's parameters and the optimizer; return the next step. */
    private fun resume(params: Map<String, FloatBuffer>, adamw: AdamW): Int {
        if (!checkpointFile.isFile) return 0
        val ck = Safetensors.read(checkpointFile)
        val meta = checkpointMetadata(checkpointFile)
        check(meta["identity"] == identity) {
            "$checkpointFile belongs to another bundle, program or schedule: delete it or choose another run folder"
        }
        val m = HashMap<String, FloatArray>(); val v = HashMap<String, FloatArray>()
        for ((name, buf) in params) {
            val p = ck.getValue("param/$name").floats()
            for (i in p.indices) buf.put(i, p[i])
            m[name] = ck.getValue("m/$name").floats()
            v[name] = ck.getValue("v/$name").floats()
        }
        val step = meta.getValue("step").toInt()
        adamw.restore(meta.getValue("optimizer_steps").toLong(), m, v)
        val ls = JSONArray(meta.getValue("losses"))
        losses.clear(); for (i in 0 until ls.length()) losses.add(ls.getDouble(i).toFloat())
        return step
    }

    private fun saveCheckpoint(params: Map<String, FloatBuffer>, adamw: AdamW, step: Int) {
        val t = LinkedHashMap<String, Pair<LongArray, FloatArray>>()
        for ((name, buf) in params) {
            val n = buf.capacity()
            t["param/$name"] = longArrayOf(n.toLong()) to FloatArray(n) { buf.get(it) }
            t["m/$name"] = longArrayOf(n.toLong()) to adamw.m.getValue(name)
            t["v/$name"] = longArrayOf(n.toLong()) to adamw.v.getValue(name)
        }
        Safetensors.writeF32(checkpointFile, t, mapOf("step" to step.toString(),
            "losses" to JSONArray(losses.map { it.toDouble() }).toString(),
            "optimizer_steps" to adamw.step.toString(), "identity" to identity))
    }

    private fun saveLora(params: Map<String, FloatBuffer>): File {
        val out = File(File(runDir, "lora"), BundleContract.LORA_FILE)
        out.parentFile!!.mkdirs()
        val t = LinkedHashMap<String, Pair<LongArray, FloatArray>>()
        for ((name, buf) in params) {
            val key = bundle.trainable[name] ?: error("parameter $name has no LoRA key in the manifest")
            check(key.startsWith(BundleContract.LORA_KEY_PREFIX)) { "LoRA key $key lacks ${BundleContract.LORA_KEY_PREFIX}" }
            t[key] = paramShapes.getValue(name) to FloatArray(buf.capacity()) { buf.get(it) }
        }
        Safetensors.writeF32(out, t, bundle.loraMetadata)
        return out
    }

    companion object {
        fun checkpointMetadata(file: File): Map<String, String> {
            java.io.RandomAccessFile(file, "r").use { f ->
                val lenBytes = ByteArray(8); f.readFully(lenBytes)
                val len = java.nio.ByteBuffer.wrap(lenBytes).order(java.nio.ByteOrder.LITTLE_ENDIAN).long.toInt()
                val header = ByteArray(len); f.readFully(header)
                val meta = org.json.JSONObject(String(header, Charsets.UTF_8)).optJSONObject("__metadata__")
                    ?: return emptyMap()
                return meta.keys().asSequence().associateWith { meta.getString(it) }
            }
        }
    }
}
