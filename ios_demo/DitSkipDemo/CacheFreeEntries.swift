import Foundation

/// x0-only and cache-free bundles: sample -> its encoded cache entry, computed at the step: the Swift twin of
/// CacheFreeEntries.kt (run on the JVM against runtime/subject.py CacheFreeEntries in tests/test_app_subject_stage.py).
/// x0 read from the bundle's x0 cache (x0-only) or computed from the sample's photo (cache-free: `subject_stage.photos`,
/// the normalised PNGs, read as photos.py read_png -> SubjectStage.x0, tiled when `encode_tiling` says so); noise =
/// PortableRng(noise seed); the residuals by SubjectStage.residuals; coded in memory with the bundle's codec
/// (CodecEncoder.encodeEntry): exactly the entry a stored cache's read would give. Refused in one line when made, before
/// training: a lowrank codec, a bundle without the programs it needs. Not compiled here (no Swift compiler).
final class CacheFreeEntries: EntrySource {
    private let bundle: TrainingBundle
    private let runner: ForwardRunner
    let codec: CacheCodec
    let shapes: [(String, [Int])]
    let spans: SkipSpans
    let sMin: Int
    let tiling: EncodeTiling
    /// The text conditioning of the last sample's photo, as the embed program takes it (per-photo captions: rows).
    private var cond: (row: Int, tensors: [String: FloatTensor])?
    private let photoFiles: [String]
    private var photos: [Int: (h: Int, w: Int, pixels: [Float])] = [:]
    private let x0Cache: ResidualCache?
    let parts: [String: (String, [Int])]

    init(_ bundle: TrainingBundle, runner: ForwardRunner) throws {
        self.bundle = bundle
        self.runner = runner
        let root = bundle.root.path
        guard bundle.cacheMode != BundleContract.storedMode
        else { throw TrainError.bundle("\(root): a stored bundle: its entries are its residual cache's") }
        let m = bundle.manifest
        guard let stage = m["subject_stage"] as? [String: Any], let spec = stage["cache_codec"] as? String,
              let es = stage["entry_shapes"] as? [String: [Int]], let plan = m["plan"] as? [String: Any],
              let sched = m["schedule"] as? [String: Any], let sMin = sched["s_min_px"] as? Int
        else { throw TrainError.bundle("\(root)/manifest.json: subject_stage, plan or schedule incomplete") }
        codec = try CacheCodec.parse(spec)
        shapes = es.keys.sorted().map { ($0, es[$0]!) }
        try codec.requireEncodable(shapes.map(\.0).filter { $0 != BundleContract.x0Key })     // lowrank: refused here
        spans = SkipSpans(numBlocks: plan["num_blocks"] as? Int ?? 0, nFront: plan["n_front"] as? Int ?? 0,
                          nBack: plan["n_back"] as? Int ?? 0)
        self.sMin = sMin
        tiling = CacheFreeEntries.encodeTilingOf(m, sMin: sMin)
        photoFiles = stage["photos"] as? [String] ?? []
        x0Cache = bundle.cacheMode == BundleContract.x0OnlyMode ? bundle.cache : nil
        parts = Dictionary(uniqueKeysWithValues: try codec.parts(shapes).map { ($0.0, ($0.1, $0.2)) })
        try checkPrograms("\(root)/manifest.json")
        guard x0Cache != nil || !photoFiles.isEmpty
        else { throw TrainError.bundle("\(root)/manifest.json: a \(bundle.cacheMode) bundle without subject_stage.photos") }
    }

    private func condFor(_ photo: Int) throws -> [String: FloatTensor] {
        let row = bundle.perPhotoText ? photo : 0
        if let cond, cond.row == row { return cond.tensors }
        var m: [String: FloatTensor] = [:]
        for (k, t) in try bundle.condFor(photo) {
            m[BundleContract.condPrefix + k] = FloatTensor(shape: t.shape, data: try t.floats())
        }
        cond = (row, m)
        return m
    }

    /// forward.py subject_programs: the encode programs encode_tiling lists (the one `encode` untiled; staged: each
    /// one's stage programs), embed, and the blocks the residuals need, refused in one line naming what is missing.
    private func checkPrograms(_ where_: String) throws {
        var names = Set<String>()
        var blocks = Set<Int>()
        for p in bundle.manifest[BundleContract.programsField] as? [[String: Any]] ?? [] {
            guard p["runtime"] as? String == BundleContract.etRuntime, let name = p["name"] as? String else { continue }
            names.insert(name)
            if name == BundleContract.etBlock, let i = p[BundleContract.etBlock] as? Int { blocks.insert(i) }
        }
        var missing: [String] = []
        for name in tiling.allPrograms() + [BundleContract.etEmbed] where !names.contains(name) && !missing.contains(name) {
            missing.append(name)
        }
        guard missing.isEmpty else { throw TrainError.bundle(SubjectStage.noProgramsMessage(where_, missing)) }
        let need = Array(0..<(spans.nBack > 0 ? spans.numBlocks : spans.nFront))
        let absent = need.filter { !blocks.contains($0) }
        guard absent.isEmpty
        else { throw TrainError.bundle("\(where_): no block program for blocks \(Array(absent.prefix(5))) (the residuals need blocks 0..\(need.last ?? 0))") }
    }

    /// subject.py CacheFreeEntries.photo: the bundle's normalised photo, [3, h, w] in [-1, 1], read once.
    func photo(_ index: Int) throws -> (h: Int, w: Int, pixels: [Float]) {
        if let p = photos[index] { return p }
        guard photoFiles.indices.contains(index)
        else { throw TrainError.bundle("\(bundle.root.path): sample photo \(index), the bundle holds \(photoFiles.count) photos") }
        let p = try PngRead.photo(bundle.root.appendingPathComponent(photoFiles[index]))
        photos[index] = p
        return p
    }

    /// The sample's entry as encode_entry gives it: ["x0", "<residual>.<part>", ...].
    func encoded(_ s: Sample) throws -> [String: EncodedPart] {
        let x0: FloatTensor
        if let x0Cache {
            guard let t = try x0Cache.read(s.index)[BundleContract.x0Key]
            else { throw TrainError.bundle("x0 cache entry \(s.index) has no x0") }
            x0 = FloatTensor(shape: t.shape, data: try t.floats())
        } else {
            let p = try photo(s.photo)
            let planned = PlannedSample(index: s.index, photo: s.photo, t: Double(s.t), x0: s.cropBox[0], y0: s.cropBox[1],
                                        side: s.cropBox[2], noiseSeed: s.noiseSeed)
            x0 = try SubjectStage.x0(runner, photo: p.pixels, h: p.h, w: p.w, sample: planned, sMin: sMin, tiling: tiling)
        }
        let noise = FloatTensor(shape: x0.shape, data: PortableRng.normal(seed: s.noiseSeed, count: x0.data.count))
        let residuals = try SubjectStage.residuals(runner, spans: spans, x0: x0, noise: noise, t: s.t, cond: try condFor(s.photo))
        return try CodecEncoder.encodeEntry(codec, [(BundleContract.x0Key, x0)] + residuals)
    }

    func read(_ s: Sample) throws -> [String: RawTensor] {
        try encoded(s).mapValues { p in
            RawTensor(dtype: ResidualCache.safetensorsDtype[p.dtype]!, shape: p.shape, bytes: p.bytes)
        }
    }

    /// forward.py encode_tiling_of on a manifest: its record (`stages` absent: 1, an unsplit encoder), or (a bundle
    /// written before it) untiled.
    static func encodeTilingOf(_ m: [String: Any], sMin: Int) -> EncodeTiling {
        guard let rec = m[BundleContract.encodeTilingField] as? [String: Any],
              let progs = rec[BundleContract.encodeTilingProgramsField] as? [String: String]
        else { return EncodeTiling.untiled(sMin) }
        let tiled = rec["tiled"] as? Bool ?? false
        return EncodeTiling(tilePx: rec["tile_px"] as? Int ?? sMin, stridePx: rec["stride_px"] as? Int ?? sMin,
                            scale: tiled ? rec["scale"] as? Int ?? 0 : 0, tiled: tiled,
                            programs: progs.keys.sorted().map { ($0, progs[$0]!) },
                            stages: rec[BundleContract.encodeTilingStagesField] as? Int ?? 1)
    }
}

/// The bundle's photos as runtime/photos.py read_png gives them (PIL convert("RGB"), / 127.5 - 1 in float32): the
/// twin of PngRead in CacheFreeEntries.kt: an 8-bit, non-interlaced PNG (grey, grey + alpha, RGB or RGBA) decoded here:
/// zlib (NSData.decompressed(using: .zlib) on the raw deflate stream) and the five PNG row filters; alpha dropped, grey
/// repeated.
enum PngRead {
    static let signature: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]

    /// [3, h, w] float32 in [-1, 1].
    static func photo(_ url: URL) throws -> (h: Int, w: Int, pixels: [Float]) {
        let (h, w, rgb) = try self.rgb(url)
        var out = [Float](repeating: 0, count: 3 * h * w)
        for c in 0..<3 { for y in 0..<h { for x in 0..<w {
            out[(c * h + y) * w + x] = Float(rgb[(y * w + x) * 3 + c]) / 127.5 - 1
        } } }
        return (h, w, out)
    }

    /// (h, w, RGB bytes [h, w, 3]).
    static func rgb(_ url: URL) throws -> (Int, Int, [UInt8]) {
        let b = [UInt8](try Data(contentsOf: url))
        guard b.count > 8, Array(b[0..<8]) == signature else { throw TrainError.bundle("\(url.path): not a PNG file") }
        func u32(_ i: Int) -> Int { Int(b[i]) << 24 | Int(b[i + 1]) << 16 | Int(b[i + 2]) << 8 | Int(b[i + 3]) }
        var at = 8, w = 0, h = 0, colorType = -1
        var idat = Data()
        chunks: while at + 8 <= b.count {
            let len = u32(at)
            let type = String(bytes: b[(at + 4)..<(at + 8)], encoding: .ascii) ?? ""
            guard at + 12 + len <= b.count else { throw TrainError.bundle("\(url.path): truncated PNG (\(type) chunk)") }
            let d = at + 8
            if type == "IHDR" {          // an if chain, as the Kotlin (the contract test reads `case "..."` as input names)
                w = u32(d); h = u32(d + 4)
                let depth = Int(b[d + 8]); colorType = Int(b[d + 9]); let interlace = Int(b[d + 12])
                guard depth == 8, [0, 2, 4, 6].contains(colorType), interlace == 0
                else { throw TrainError.bundle("\(url.path): a PNG of bit depth \(depth), colour type \(colorType), interlace \(interlace): the bundle's photos are 8-bit grey / RGB (with or without alpha), not interlaced") }
            } else if type == "IDAT" {
                idat.append(contentsOf: b[d..<(d + len)])
            } else if type == "IEND" {
                break chunks
            }
            at = d + len + 4
        }
        guard colorType >= 0, w > 0, h > 0, idat.count > 6 else { throw TrainError.bundle("\(url.path): a PNG without its IHDR or image data") }
        let channels = [1, 0, 3, 0, 2, 0, 4][colorType]
        let stride = w * channels
        // zlib: 2 header bytes, the deflate stream, 4 bytes of Adler-32; Apple's .zlib is the raw deflate stream
        let inflated = try (idat.subdata(in: 2..<(idat.count - 4)) as NSData).decompressed(using: .zlib) as Data
        let raw = [UInt8](inflated)
        guard raw.count >= h * (stride + 1) else { throw TrainError.bundle("\(url.path): truncated PNG image data") }
        var px = [UInt8](repeating: 0, count: h * stride)
        for y in 0..<h {
            let filter = Int(raw[y * (stride + 1)])
            let src = y * (stride + 1) + 1
            let row = y * stride
            for x in 0..<stride {
                let r = Int(raw[src + x])
                let a = x >= channels ? Int(px[row + x - channels]) : 0
                let up = y > 0 ? Int(px[row - stride + x]) : 0
                let c = x >= channels && y > 0 ? Int(px[row - stride + x - channels]) : 0
                let v: Int
                switch filter {
                case 0: v = r
                case 1: v = r + a
                case 2: v = r + up
                case 3: v = r + (a + up) / 2
                case 4: v = r + paeth(a, up, c)
                default: throw TrainError.bundle("\(url.path): PNG row \(y) has filter \(filter) (corrupt)")
                }
                px[row + x] = UInt8(truncatingIfNeeded: v)
            }
        }
        var out = [UInt8](repeating: 0, count: h * w * 3)
        for q in 0..<(h * w) { for c in 0..<3 {
            out[q * 3 + c] = px[q * channels + (channels >= 3 ? c : 0)]
        } }
        return (h, w, out)
    }

    private static func paeth(_ a: Int, _ b: Int, _ c: Int) -> Int {
        let p = a + b - c
        let pa = abs(p - a), pb = abs(p - b), pc = abs(p - c)
        return pa <= pb && pa <= pc ? a : (pb <= pc ? b : c)
    }
}
