import Foundation

/// Decoding latents in tiles, line for line ditskip_edge/runtime/tiling.py and Tiling.kt (diffusers' tiled_decode):
/// tiles start every `stride` latent cells (smaller at the far edges); each decoded tile is blended into its upper,
/// then its left (already blended) neighbour over (tile - stride) * scale pixels, and its first stride * scale rows
/// and columns go to the picture. With tile >= the latent side there is one tile: the plain decode.
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

    /// latents [1, c, h, w] -> image [3, h scale, w scale]; decodeTile(latents of one tile, its h, its w).
    static func decodeTiled(_ latents: [Float], c: Int, h: Int, w: Int, tile: Int, stride: Int, scale: Int,
                            _ decodeTile: ([Float], Int, Int) throws -> Tile) rethrows -> Tile {
        let blend = (tile - stride) * scale, keep = stride * scale
        var image: Tile? = nil
        var above: [Tile] = []
        for i in starts(h, stride) {
            var row: [Tile] = []
            for (k, j) in starts(w, stride).enumerated() {
                let th = min(tile, h - i), tw = min(tile, w - j)
                var part = [Float](repeating: 0, count: c * th * tw)
                for ch in 0..<c { for y in 0..<th { for x in 0..<tw {
                    part[(ch * th + y) * tw + x] = latents[(ch * h + i + y) * w + j + x]
                } } }
                var t = try decodeTile(part, th, tw)
                if !above.isEmpty { blendRows(above[k], &t, blend) }
                if let left = row.last { blendCols(left, &t, blend) }
                row.append(t)
                if image == nil { image = Tile(c: t.c, h: h * scale, w: w * scale, data: [Float](repeating: 0, count: t.c * h * scale * w * scale)) }
                let ph = min(keep, t.h), pw = min(keep, t.w)
                for ch in 0..<t.c { for y in 0..<ph { for x in 0..<pw {
                    image!.data[(ch * image!.h + i * scale + y) * image!.w + j * scale + x] = t.data[(ch * t.h + y) * t.w + x]
                } } }
            }
            above = row
        }
        return image!
    }
}
