// Host check of the subject stage (kotlinc on a plain JVM): runs the app's CacheCodecs, CacheWriter and SubjectStage
// on float32 arrays from files and writes a residual cache that tests/test_app_subject_stage.py compares byte for byte
// with the Python runtime's. Not part of the app. In its own folder: tests/test_bundle_contract.py compiles every .kt
// directly in hostcheck/ with an app file list that does not hold the subject-stage files.
//
//   cache SPEC.json OUT_DIR [STOP_AFTER]   residuals given: spec {codec, shapes, identity, shard_bytes, run,
//                                          entries: [file of one entry's tensors, float32 LE, in shapes order]}
//   stage SPEC.json OUT_DIR [STOP_AFTER]   the whole per-sample loop with stand-in programs (StandIn below):
//                                          spec {schedule, photos: [[h, w, file]], photo_names, spans, model, codec,
//                                          shapes, cond: {name: [shape, file]}, shard_bytes, run}
//   model SPEC.json WORK_DIR [STOP_AFTER]  ModelBundle.writeCache on a model bundle folder with the stand-in programs:
//                                          spec {bundle, photos: [[name, sha256, h, w, file]], events?: file the
//                                          stand-in's encode tile (stage) program loads / releases are written to, a
//                                          line each}
//   subject SPEC.json OUT_DIR [STOP_AFTER] SubjectBundle.write: the subject bundle at OUT_DIR (stand-in programs, photo
//                                          PNGs by javax.imageio): spec {bundle, photos: [[name, sha256, h, w, file]],
//                                          fail_at_png?: true to fail while writing the photos}
//   entries BUNDLE OUT_DIR                 TrainingBundle + CacheFreeEntries on an x0-only or cache-free subject bundle
//                                          (stand-in programs): for every sample, the training step's entry inputs
//                                          (TrainingBundle.stepInputs) and the entry's x0, each part's raw bytes in
//                                          OUT_DIR/<sample>/<part>.bin, its text conditioning inputs in
//                                          OUT_DIR/cond_<sample>/<key>.bin; prints "entries N <mode>"
//   lanczos SPEC.json                      PhotoNormalise: spec [[h, w, data_px, rgb_file (uint8 [h, w, 3]), out_file]]:
//                                          writes each normalised photo's uint8 [h', w', 3] (short side -> data_px)
//   tiles SPEC.json                        Tiling.encodeTiled / decodeTiled with stand-in tile functions (PoolMix,
//                                          ChannelUp below): spec [{kind: encode|decode|encode_shape, c, h, w, tile,
//                                          stride, scale, by_shape, in, out}] (float32 files); prints "order <case>
//                                          HxW HxW .." (the tile shapes in the order the tile function ran;
//                                          encode_shape: Tiling.encodeTiledShapes, "HxW:<tiles>" a call, each tile's
//                                          result poolMix + 0.001 x its place in the call)
// Prints "resumed R computed C" (entries taken from the journal, entries computed by this run).
import org.ditskip.demo.CacheCodec
import org.ditskip.demo.CacheFreeEntries
import org.ditskip.demo.TrainingBundle
import org.ditskip.demo.CacheWriter
import org.ditskip.demo.FloatTensor
import org.ditskip.demo.ForwardRunner
import org.ditskip.demo.ModelBundle
import org.ditskip.demo.PhotoNormalise
import org.ditskip.demo.PngWriter
import org.ditskip.demo.SubjectBundle
import org.ditskip.demo.SubjectPhoto
import org.ditskip.demo.ProgramKey
import org.ditskip.demo.PyJson
import org.ditskip.demo.Schedule
import org.ditskip.demo.ScheduleConfig
import org.ditskip.demo.SkipSpans
import org.ditskip.demo.SubjectStage
import org.ditskip.demo.Tiling
import java.awt.image.BufferedImage
import java.io.File
import javax.imageio.ImageIO
import java.nio.ByteBuffer
import java.nio.ByteOrder

fun readF32(path: String): FloatArray {
    val b = File(path).readBytes()
    val out = FloatArray(b.size / 4)
    ByteBuffer.wrap(b).order(ByteOrder.LITTLE_ENDIAN).asFloatBuffer().get(out)
    return out
}

@Suppress("UNCHECKED_CAST")
fun obj(v: Any?): Map<String, Any?> = v as Map<String, Any?>

@Suppress("UNCHECKED_CAST")
fun ints(v: Any?): IntArray = (v as List<Any?>).map { (it as Long).toInt() }.toIntArray()

fun shapesOf(v: Any?): LinkedHashMap<String, IntArray> {
    val out = LinkedHashMap<String, IntArray>()
    for ((k, s) in obj(v)) out[k] = ints(s)
    return out
}

fun writerFor(spec: Map<String, Any?>, out: String): CacheWriter =
    CacheWriter(File(out), obj(spec["identity"]), CacheCodec.parse(spec["codec"] as String), shapesOf(spec["shapes"]),
                spec["shard_bytes"] as Long, resumable = true, run = spec["run"] as String)

fun main(args: Array<String>) {
    if (args[0] == "lanczos") return lanczos(PyJson.parse(File(args[1]).readText()) as List<*>)
    if (args[0] == "tiles") return tiles(PyJson.parse(File(args[1]).readText()) as List<*>)
    if (args[0] == "entries") return entries(File(args[1]), File(args[2]))
    val spec = obj(PyJson.parse(File(args[1]).readText()))
    val stopAfter = args.getOrNull(3)?.toInt()
    if (args[0] == "cache") return cache(spec, args[2], stopAfter)
    if (args[0] == "stage") return stage(spec, args[2], stopAfter)
    if (args[0] == "model") return model(spec, args[2], stopAfter)
    if (args[0] == "subject") return subject(spec, args[2], stopAfter)
    error("unknown mode ${args[0]}")
}

fun cache(spec: Map<String, Any?>, out: String, stopAfter: Int?) {
    val writer = writerFor(spec, out)
    val resumed = writer.nextIndex
    val files = (spec["entries"] as List<*>).map { it as String }
    var computed = 0
    for (k in writer.nextIndex until files.size) {
        val flat = readF32(files[k])
        val tensors = LinkedHashMap<String, FloatTensor>()
        var at = 0
        for ((name, shape) in writer.shapes) {
            val n = shape.fold(1) { a, b -> a * b }
            tensors[name] = FloatTensor(shape, flat.copyOfRange(at, at + n))
            at += n
        }
        val x0 = tensors.remove("x0")!!
        writer.codec.requireEncodable(tensors.keys)
        SubjectStage.addEntry(writer, k, x0, tensors)
        computed += 1
        if (stopAfter != null && computed >= stopAfter && writer.nextIndex < files.size) {
            writer.close(); println("resumed $resumed computed $computed"); return
        }
    }
    writer.finish(mapOf("rel_error" to SubjectStage.relErrorSummary(writer.extras)))
    println("resumed $resumed computed $computed")
}

fun stage(spec: Map<String, Any?>, out: String, stopAfter: Int?) {
    val c = obj(spec["schedule"])
    val cfg = ScheduleConfig((c["steps"] as Long).toInt(), (c["grad_accum"] as Long).toInt(), (c["s_min_px"] as Long).toInt(),
                             (c["s_max_px"] as Long).toInt(), (c["multiple_px"] as Long).toInt(), c["seed"] as Long,
                             c["t_sampling"] as String, c["dynamic_patches"] as Boolean)
    val photos = (spec["photos"] as List<*>).map { p -> val l = p as List<*>
        Triple((l[0] as Long).toInt(), (l[1] as Long).toInt(), readF32(l[2] as String)) }
    val sizes = photos.map { intArrayOf(it.first, it.second) }
    val samples = Schedule.make(cfg, sizes)
    val sp = ints(spec["spans"])
    val spans = SkipSpans(sp[0], sp[1], sp[2])
    val schedule = SubjectStage.scheduleJson(cfg, samples, (spec["photo_names"] as List<*>).map { it as String }, sizes)
    val identity = SubjectStage.cacheIdentity(obj(spec["model"]), spans, schedule)
    val writer = CacheWriter(File(out), identity, CacheCodec.parse(spec["codec"] as String), shapesOf(spec["shapes"]),
                             spec["shard_bytes"] as Long, resumable = true, run = spec["run"] as String)
    val cond = LinkedHashMap<String, FloatTensor>()
    for ((k, v) in obj(spec["cond"])) { val l = v as List<*>; cond[k] = FloatTensor(ints(l[0]), readF32(l[1] as String)) }
    val resumed = writer.nextIndex
    var computed = 0
    SubjectStage.writeCache(writer, samples, photos, StandIn, spans, cfg.sMinPx, cond, stopAfter) { _, _ -> computed += 1 }
    println("resumed $resumed computed $computed")
}

fun model(spec: Map<String, Any?>, work: String, stopAfter: Int?) {
    val bundle = ModelBundle(File(spec["bundle"] as String))
    val photos = (spec["photos"] as List<*>).map { p -> val l = p as List<*>
        SubjectPhoto(l[0] as String, l[1] as String, (l[2] as Long).toInt(), (l[3] as Long).toInt(), readF32(l[4] as String)) }
    var computed = 0
    var resumed = -1
    StandIn.events.clear()
    StandIn.stages = bundle.encodeTiling.stages
    try {
        bundle.writeCache(photos, 0, File(work), stopAfter, StandIn) { done, _ -> if (resumed < 0) resumed = done - 1; computed += 1 }
    } finally {
        (spec["events"] as? String)?.let { File(it).writeText(StandIn.events.joinToString("") { e -> e + "\n" }) }
    }
    println("resumed $resumed computed $computed")
}

fun entries(root: File, out: File) {
    val bundle = TrainingBundle(root)
    val source = CacheFreeEntries(bundle, StandIn)
    StandIn.stages = source.tiling.stages
    bundle.useEntries(source)                                        // the entry inputs checked against its layout
    for (s in bundle.samples) {
        val dir = File(out, s.index.toString())
        dir.mkdirs()
        for ((spec, v) in bundle.stepInputs(s)) {                    // what EtTrainer hands the training program
            val t = v as? org.ditskip.demo.RawTensor ?: continue
            val b = ByteArray(t.bytes.remaining()); t.bytes.duplicate().get(b)
            if (spec.name.startsWith("cond.")) {                     // beside the entry: cond_<index>/<key>.bin
                File(out, "cond_${s.index}").apply { mkdirs() }.resolve(spec.name.removePrefix("cond.") + ".bin").writeBytes(b)
            } else if (spec.name.startsWith("entry.")) {
                File(dir, spec.name.removePrefix("entry.") + ".bin").writeBytes(b)
            }
        }
        val x0 = source.read(s).getValue("x0")
        val b = ByteArray(x0.bytes.remaining()); x0.bytes.duplicate().get(b)
        File(dir, "x0.bin").writeBytes(b)
    }
    println("entries ${bundle.samples.size} ${bundle.cacheMode}")
}

/** The JVM's PNG writer for the check (the app's is Bitmap.compress). */
class ImageIoPng(private val failAt: Boolean = false) : PngWriter {
    override fun write(rgb: ByteArray, h: Int, w: Int, out: File) {
        if (failAt) throw java.io.IOException("$out: cannot write (injected failure)")
        val img = BufferedImage(w, h, BufferedImage.TYPE_INT_RGB)
        for (y in 0 until h) for (x in 0 until w) {
            val i = (y * w + x) * 3
            img.setRGB(x, y, ((rgb[i].toInt() and 0xFF) shl 16) or ((rgb[i + 1].toInt() and 0xFF) shl 8) or (rgb[i + 2].toInt() and 0xFF))
        }
        require(ImageIO.write(img, "png", out)) { "$out: no PNG writer" }
    }
}

fun subject(spec: Map<String, Any?>, out: String, stopAfter: Int?) {
    val bundle = ModelBundle(File(spec["bundle"] as String))
    val photos = (spec["photos"] as List<*>).map { p -> val l = p as List<*>
        SubjectPhoto(l[0] as String, l[1] as String, (l[2] as Long).toInt(), (l[3] as Long).toInt(), readF32(l[4] as String)) }
    var computed = 0
    var resumed = -1
    val manifest = SubjectBundle.write(bundle, photos, 0, File(out), ImageIoPng(spec["fail_at_png"] == true),
                                       stopAfter = stopAfter, runner = StandIn) { done, _ -> if (resumed < 0) resumed = done - 1; computed += 1 }
    if (resumed < 0) resumed = photos.size - computed
    println("resumed $resumed computed $computed ${if (manifest == null) "stopped" else "written"}")
}

fun lanczos(spec: List<*>) {
    for (item in spec) {
        val l = item as List<*>
        val h = (l[0] as Long).toInt(); val w = (l[1] as Long).toInt(); val dataPx = (l[2] as Long).toInt()
        val hw = PhotoNormalise.normalisedSize(h, w, dataPx)
        File(l[4] as String).writeBytes(PhotoNormalise.resizeLanczos(File(l[3] as String).readBytes(), h, w, hw[0], hw[1]))
    }
}

fun writeF32(path: String, data: FloatArray) {
    val b = ByteBuffer.allocate(data.size * 4).order(ByteOrder.LITTLE_ENDIAN)
    b.asFloatBuffer().put(data)
    File(path).writeBytes(b.array())
}

/** The tiled encode's stand-in tile function (tests/test_app_subject_stage.py pool_mix): pixels [3, th, tw] ->
 *  [4, th / f, tw / f] = a fixed channel mix of the f x f average pool, + half the tile's top-left pixel, + a ramp
 *  over the tile's own cells (so the result depends on the tile's content, position and size); float64, then float32. */
fun poolMix(x: FloatArray, th: Int, tw: Int, f: Int): Tiling.Tile {
    val oh = th / f; val ow = tw / f
    val pooled = DoubleArray(3 * oh * ow)
    for (ch in 0 until 3) for (y in 0 until oh) for (z in 0 until ow) {
        var sum = 0.0
        for (a in 0 until f) for (b in 0 until f) sum += x[(ch * th + y * f + a) * tw + z * f + b].toDouble()
        pooled[(ch * oh + y) * ow + z] = sum / (f * f)
    }
    return Tiling.Tile(4, oh, ow, FloatArray(4 * oh * ow) { q ->
        val k = q / (oh * ow); val y = q / ow % oh; val z = q % ow
        var v = 0.0
        for (ch in 0 until 3) v += (((k * 3 + ch) % 5 - 2) * 0.3 + 0.1) * pooled[(ch * oh + y) * ow + z]
        (v + 0.5 * x[(k % 3) * th * tw].toDouble() + 0.01 * (y + 2 * z) / (oh + ow)).toFloat() })
}

/** The tiled decode's stand-in (as GenCheck.kt's): channel mix + nearest upsample by f + a ramp within each f cell. */
fun channelUp(t: FloatArray, th: Int, tw: Int, f: Int): Tiling.Tile =
    Tiling.Tile(3, th * f, tw * f, FloatArray(3 * th * f * tw * f) { q ->
        val o = q / (th * f * tw * f); val y = q / (tw * f) % (th * f); val x = q % (tw * f)
        val a = t[(0 * th + y / f) * tw + x / f]; val b = t[(1 * th + y / f) * tw + x / f]
        a * (o + 1).toFloat() - b * 0.5f + (x % f).toFloat() * 0.25f })

fun tiles(spec: List<*>) {
    for ((n, item) in spec.withIndex()) {
        val m = obj(item)
        fun i(k: String) = (m[k] as Long).toInt()
        val x = readF32(m["in"] as String)
        val order = ArrayList<String>()
        val f = i("scale")
        val out = if (m["kind"] == "encode_shape")
            Tiling.encodeTiledShapes(x, i("h"), i("w"), i("tile"), i("stride"), f) { parts, th, tw ->
                order.add(Tiling.shapeKey(th, tw) + ":" + parts.size)
                parts.mapIndexed { n, t -> val y = poolMix(t, th, tw, f)
                    Tiling.Tile(y.c, y.h, y.w, FloatArray(y.data.size) { y.data[it] + 0.001f * n.toFloat() }) } }
        else if (m["kind"] == "encode")
            Tiling.encodeTiled(x, i("h"), i("w"), i("tile"), i("stride"), f, m["by_shape"] as Boolean) { t, th, tw ->
                order.add(Tiling.shapeKey(th, tw)); poolMix(t, th, tw, f) }
        else Tiling.decodeTiled(x, i("c"), i("h"), i("w"), i("tile"), i("stride"), f) { t, th, tw ->
                order.add(Tiling.shapeKey(th, tw)); channelUp(t, th, tw, f) }
        writeF32(m["out"] as String, out.data)
        println("order $n ${out.c} ${out.h} ${out.w} ${order.joinToString(" ")}")
    }
}

/** Stand-in programs, deterministic float32 elementwise functions of their inputs (the Python test has their twins):
 *  encode: x0[c, i, j] = patch[c % 3, 2i, 2j] * 0.5 (c + 1), C = 4; a tiled encode's encode.<h>x<w> (any tile
 *  shape): the same + patch[c % 3, 0, 0] * 0.25 + 0.0625 i / (h / 2) (depends on the tile's position and size), kept
 *  loaded from its first tile to release() (`events`: "load", "release"; "drop" when another encode program runs
 *  first; any other program run while one is held fails: one program loaded at a time); embed: stream.img [1, h w, C] = (x0 (1 - t) +
 *  noise t) transposed, stream.txt = cond.txt * 2, ctx.temb [1, C] = t (c + 1); block i (a = 0.75 + 0.0625 i):
 *  img' = img a + temb + txt[token 0], txt' = txt a - temb 0.5. A staged encoder's "<encode program>.s<k>" of
 *  `stages` (held like a tile program): stage 0 patch [1, 3, th, tw] -> features [1, 12, th / 2, tw / 2],
 *  f[4c + 2a + b, i, j] = patch[c, 2i + a, 2j + b] 0.5 + patch[c, 0, 0] 0.25 (space to depth); a middle stage k
 *  f'[q] = f[q] (0.75 + 0.125 k) + f[(q + 1) % 12] 0.25; the last x0[c, i, j] = f[c] 0.5 + f[c + 4] 0.25 -
 *  f[c + 8] 0.125 + 0.0625 i / h (test_app_subject_stage.py standin_stage). */
object StandIn : ForwardRunner {
    const val C = 4
    const val F = 12                                                   // a staged encoder's feature channels
    val events = ArrayList<String>()
    var stages = 1
    private var held: String? = null
    private val stageName = Regex("^encode(\\.\\d+x\\d+)?\\.s(\\d+)$")

    override fun release() {
        if (held != null) events.add("release $held")
        held = null
    }

    override fun run(program: ProgramKey, inputs: Map<String, FloatTensor>): Map<String, FloatTensor> {
        if (program.name.startsWith("encode.")) {
            if (held != program.name) {
                if (held != null) events.add("drop $held")           // another encode program without release() first
                events.add("load ${program.name}"); held = program.name
            }
        } else check(held == null) { "${program.name} run while the tile program $held is still loaded" }
        val stage = stageName.find(program.name)?.groupValues?.get(2)?.toInt()
        return when {
            stage != null -> stageRun(stage, inputs)
            program.name.startsWith("encode.") -> {
                val p = inputs.getValue("patch"); val ph = p.shape[2]; val pw = p.shape[3]; val h = ph / 2; val w = pw / 2
                mapOf("x0" to FloatTensor(intArrayOf(1, C, h, w), FloatArray(C * h * w) { q ->
                    val ch = q / (h * w); val i = q / w % h; val j = q % w
                    p.data[((ch % 3) * ph + 2 * i) * pw + 2 * j] * (0.5f * (ch + 1)) + p.data[(ch % 3) * ph * pw] * 0.25f +
                        0.0625f * (i.toFloat() / h.toFloat()) }))
            }
            program.name == "encode" -> {
                val p = inputs.getValue("patch"); val s = p.shape[2]; val h = s / 2
                mapOf("x0" to FloatTensor(intArrayOf(1, C, h, h), FloatArray(C * h * h) { q ->
                    val ch = q / (h * h); val i = q / h % h; val j = q % h
                    p.data[((ch % 3) * s + 2 * i) * s + 2 * j] * (0.5f * (ch + 1)) }))
            }
            program.name == "embed" -> {
                val x0 = inputs.getValue("x0"); val noise = inputs.getValue("noise"); val t = inputs.getValue("t").data[0]
                val n = x0.data.size / C
                val txt = inputs.getValue("cond.txt")
                linkedMapOf(
                    "stream.img" to FloatTensor(intArrayOf(1, n, C), FloatArray(n * C) { q ->
                        val tok = q / C; val ch = q % C
                        x0.data[ch * n + tok] * (1f - t) + noise.data[ch * n + tok] * t }),
                    "stream.txt" to FloatTensor(txt.shape, FloatArray(txt.data.size) { txt.data[it] * 2f }),
                    "ctx.temb" to FloatTensor(intArrayOf(1, C), FloatArray(C) { t * (it + 1).toFloat() }))
            }
            else -> {
                val a = 0.75f + 0.0625f * program.block
                val img = inputs.getValue("stream.img"); val txt = inputs.getValue("stream.txt")
                val temb = inputs.getValue("ctx.temb").data
                linkedMapOf(
                    "stream.img" to FloatTensor(img.shape, FloatArray(img.data.size) { q ->
                        img.data[q] * a + temb[q % C] + txt.data[q % C] }),
                    "stream.txt" to FloatTensor(txt.shape, FloatArray(txt.data.size) { q ->
                        txt.data[q] * a - temb[q % C] * 0.5f }))
            }
        }
    }

    private fun stageRun(k: Int, inputs: Map<String, FloatTensor>): Map<String, FloatTensor> {
        if (k == 0) {
            val p = inputs.getValue("patch"); val th = p.shape[2]; val tw = p.shape[3]; val h = th / 2; val w = tw / 2
            val f = FloatTensor(intArrayOf(1, F, h, w), FloatArray(F * h * w) { q ->
                val ch = q / (h * w); val i = q / w % h; val j = q % w; val c = ch / 4; val a = ch / 2 % 2; val b = ch % 2
                p.data[(c * th + 2 * i + a) * tw + 2 * j + b] * 0.5f + p.data[c * th * tw] * 0.25f })
            return mapOf((if (stages == 1) "x0" else "features") to f)
        }
        val x = inputs.getValue("features"); val h = x.shape[2]; val w = x.shape[3]; val n = h * w
        if (k < stages - 1) {
            val a = (0.75 + 0.125 * k).toFloat()
            return mapOf("features" to FloatTensor(x.shape, FloatArray(x.data.size) { q ->
                val ch = q / n; val at = q % n
                x.data[q] * a + x.data[((ch + 1) % F) * n + at] * 0.25f }))
        }
        return mapOf("x0" to FloatTensor(intArrayOf(1, C, h, w), FloatArray(C * n) { q ->
            val ch = q / n; val at = q % n; val i = at / w
            x.data[ch * n + at] * 0.5f + x.data[(ch + 4) * n + at] * 0.25f - x.data[(ch + 8) * n + at] * 0.125f +
                0.0625f * (i.toFloat() / h.toFloat()) }))
    }
}
