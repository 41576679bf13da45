import Foundation

/// Decoding latents and encoding pictures in tiles, line for line ditskip_edge/runtime/tiling.py and Tiling.kt
/// (diffusers' tiled_decode / tiled_encode): tiles start every `stride` input units (smaller at the far edges); each
/// tile's result is blended into its upper, then its left (already blended) neighbour over `blend` output units, and
/// its first `keep` rows and columns go to the output (`runTiled`). Decoding: latent tiles, blend (tile - stride) *
/// scale pixels, keep stride * scale. Encoding (the subject stage's encode_tiling): pixel tiles, blend (tile_px -
/// stride_px) / scale latent cells, keep stride_px / scale, every tile of one shape run before the next shape (one tile
/// program loaded at a time; encodeTiledShapes: all of one shape's tiles in one call, for a staged encoder). With
/// tile >= the side there is one tile: the plain decode (encode).
enum Tiling {
    /// A decoded tile: [c, h, w] row-major.
    struct Tile { let c: Int; let h: Int; let w: Int; var data: [Float] }

    /// generation.decode.programs' key of a tile shape: "<h>x<w>" (latent cells).
    static func shapeKey(_ h: Int, _ w: Int) -> String { String(h) + "x" + String(w) }

    static func starts(_ size: Int, _ step: Int) -> [Int] { Array(Swift.stride(from: 0, to: size, by: step)) }

    /// diffusers' blend_v, in place on `tile`: its first rows fade in from `above`'s last rows.
    static func blendRows(_ above: Tile, _ tile: inout Tile, _ extent0: Int) {
        let extent = min(above.h, tile.h, extent0)
        for y in 0..<max(extent, 0) {
            let fa = Float(1 - Double(y) / Double(extent)), fb = Float(Double(y) / Double(extent))
            for ch in 0..<tile.c { for x in 0..<tile.w {
                let a = above.data[(ch * above.h + above.h - extent + y) * above.w + x]
                let k = (ch * tile.h + y) * tile.w + x
                tile.data[k] = a * fa + tile.data[k] * fb
            } }
        }
    }

    /// diffusers' blend_h, in place on `tile`: its first columns fade in from `left`'s last columns.
    static func blendCols(_ left: Tile, _ tile: inout Tile, _ extent0: Int) {
        let extent = min(left.w, tile.w, extent0)
        for x in 0..<max(extent, 0) {
            let fa = Float(1 - Double(x) / Double(extent)), fb = Float(Double(x) / Double(extent))
            for ch in 0..<tile.c { for y in 0..<tile.h {
                let a = left.data[(ch * left.h + y) * left.w + left.w - extent + x]
                let k = (ch * tile.h + y) * tile.w + x
                tile.data[k] = a * fa + tile.data[k] * fb
            } }
        }
    }

    /// The distinct tile shapes (h, w) of a tiled run over an h x w input, in first-use order (tiling.py tile_shapes).
    static func tileShapes(_ h: Int, _ w: Int, tile: Int, stride: Int) -> [[Int]] {
        var shapes: [[Int]] = []
        for i in starts(h, stride) { for j in starts(w, stride) {
            let shape = [min(tile, h - i), min(tile, w - j)]
            if !shapes.contains(shape) { shapes.append(shape) }
        } }
        return shapes
    }

    /// tiling.py run_tiled (Tiling.kt runTiled): x [c, h, w] cut into tiles of `tile` a side every `stride`;
    /// runTile(the tile's values [c, th, tw], th, tw) -> its result; each result blended into its upper, then its left
    /// (already blended) neighbour over `blend` rows / columns, its first `keep` rows and columns written to the
    /// [c', outH, outW] output at (row, column) index x keep. byShape: every tile run first, all tiles of one shape
    /// after another in tileShapes' order, and blended after (diffusers' order); otherwise tile by tile.
    static func runTiled(_ x: [Float], c: Int, h: Int, w: Int, tile: Int, stride: Int, blend: Int, keep: Int, outH: Int,
                         outW: Int, byShape: Bool, _ runTile: ([Float], Int, Int) throws -> Tile) rethrows -> Tile {
        try runTiledShapes(x, c: c, h: h, w: w, tile: tile, stride: stride, blend: blend, keep: keep, outH: outH,
                           outW: outW, byShape: byShape) { parts, th, tw in try parts.map { try runTile($0, th, tw) } }
    }

    /// tiling.py run_tiled with run_shape (Tiling.kt runTiledShapes): as runTiled, but all tiles of one shape in one
    /// call, runShape(the tiles' values [c, th, tw] in row-major order, th, tw) -> their results in that order, one
    /// call per shape in tileShapes' order, blended after (a staged encoder runs each stage's program on every tile of
    /// the shape before loading the next stage's). byShape false: tile by tile, each tile a call of its own.
    static func runTiledShapes(_ x: [Float], c: Int, h: Int, w: Int, tile: Int, stride: Int, blend: Int, keep: Int,
                               outH: Int, outW: Int, byShape: Bool = true,
                               _ runShape: ([[Float]], Int, Int) throws -> [Tile]) rethrows -> Tile {
        let rows = starts(h, stride), cols = starts(w, stride)
        var done: [[Int]: Tile] = [:]
        if byShape {
            for shape in tileShapes(h, w, tile: tile, stride: stride) {
                var at: [[Int]] = [], parts: [[Float]] = []
                for (r, i) in rows.enumerated() { for (k, j) in cols.enumerated() {
                    if [min(tile, h - i), min(tile, w - j)] == shape {
                        at.append([r, k]); parts.append(cut(x, c: c, h: h, w: w, i, j, tile).0)
                    }
                } }
                let results = try runShape(parts, shape[0], shape[1])
                precondition(results.count == parts.count, "\(results.count) results for the \(parts.count) \(shapeKey(shape[0], shape[1])) tiles")
                for (n, rk) in at.enumerated() { done[rk] = results[n] }
            }
        }
        var out: Tile? = nil
        var above: [Tile] = []
        for (r, i) in rows.enumerated() {
            var row: [Tile] = []
            for (k, j) in cols.enumerated() {
                var t: Tile
                if byShape { t = done.removeValue(forKey: [r, k])! } else {
                    let (part, th, tw) = cut(x, c: c, h: h, w: w, i, j, tile)
                    t = try runShape([part], th, tw)[0]
                }
                if !above.isEmpty { blendRows(above[k], &t, blend) }
                if let left = row.last { blendCols(left, &t, blend) }
                row.append(t)
                if out == nil { out = Tile(c: t.c, h: outH, w: outW, data: [Float](repeating: 0, count: t.c * outH * outW)) }
                let y0 = r * keep, x0 = k * keep
                let ph = min(keep, t.h, outH - y0), pw = min(keep, t.w, outW - x0)
                for ch in 0..<t.c { for y in 0..<max(ph, 0) { for z in 0..<max(pw, 0) {
                    out!.data[(ch * outH + y0 + y) * outW + x0 + z] = t.data[(ch * t.h + y) * t.w + z]
                } } }
            }
            above = row
        }
        return out!
    }

    /// The values [c, th, tw] of the tile at (i, j) of x [c, h, w], with th, tw (smaller at the far edges).
    static func cut(_ x: [Float], c: Int, h: Int, w: Int, _ i: Int, _ j: Int, _ tile: Int) -> ([Float], Int, Int) {
        let th = min(tile, h - i), tw = min(tile, w - j)
        var part = [Float](repeating: 0, count: c * th * tw)
        for ch in 0..<c { for y in 0..<th { for z in 0..<tw {
            part[(ch * th + y) * tw + z] = x[(ch * h + i + y) * w + j + z]
        } } }
        return (part, th, tw)
    }

    /// latents [1, c, h, w] -> image [3, h scale, w scale]; decodeTile(latents of one tile, its h, its w). Tile by
    /// tile (Generator.swift: the tiles' programs take mapped weights).
    static func decodeTiled(_ latents: [Float], c: Int, h: Int, w: Int, tile: Int, stride: Int, scale: Int,
                            _ decodeTile: ([Float], Int, Int) throws -> Tile) rethrows -> Tile {
        try runTiled(latents, c: c, h: h, w: w, tile: tile, stride: stride, blend: (tile - stride) * scale,
                     keep: stride * scale, outH: h * scale, outW: w * scale, byShape: false, decodeTile)
    }

    /// tiling.py encode_tiled (Tiling.kt encodeTiled): patch [1, 3, h, w] (pixels) -> latents [1, C, h / scale,
    /// w / scale]; encodeTile(the pixels of one tile [3, th, tw], th, tw) -> its latents [C, th / scale, tw / scale].
    /// byShape (the default, forward.py's): the tiles of one shape in a row, so each shape's program is loaded once.
    static func encodeTiled(_ patch: [Float], h: Int, w: Int, tilePx: Int, stridePx: Int, scale: Int, byShape: Bool = true,
                            _ encodeTile: ([Float], Int, Int) throws -> Tile) rethrows -> Tile {
        try runTiled(patch, c: 3, h: h, w: w, tile: tilePx, stride: stridePx, blend: (tilePx - stridePx) / scale,
                     keep: stridePx / scale, outH: h / scale, outW: w / scale, byShape: byShape, encodeTile)
    }

    /// tiling.py encode_tiled with encode_shape (Tiling.kt encodeTiledShapes): as encodeTiled, but encodeShape(the
    /// pixels of every tile of one shape [3, th, tw], row-major, th, tw) -> their latents, one call per tile shape in
    /// tileShapes' order (SubjectStage.encodeShape: a staged encoder's stages each run on all the shape's tiles).
    static func encodeTiledShapes(_ patch: [Float], h: Int, w: Int, tilePx: Int, stridePx: Int, scale: Int,
                                  _ encodeShape: ([[Float]], Int, Int) throws -> [Tile]) rethrows -> Tile {
        try runTiledShapes(patch, c: 3, h: h, w: w, tile: tilePx, stride: stridePx, blend: (tilePx - stridePx) / scale,
                           keep: stridePx / scale, outH: h / scale, outW: w / scale, byShape: true, encodeShape)
    }
}
