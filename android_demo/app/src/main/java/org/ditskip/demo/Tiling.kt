package org.ditskip.demo

/**
 * Decoding latents and encoding pictures in tiles, line for line ditskip_edge/runtime/tiling.py (diffusers'
 * tiled_decode / tiled_encode): tiles start every `stride` input units (smaller at the far edges); each tile's result
 * is blended into its upper, then its left (already blended) neighbour over `blend` output units, and its first `keep`
 * rows and columns go to the output ([runTiled]). Decoding: latent tiles, blend (tile - stride) * scale pixels, keep
 * stride * scale. Encoding (the subject stage's encode_tiling): pixel tiles, blend (tile_px - stride_px) / scale latent
 * cells, keep stride_px / scale, every tile of one shape run before the next shape (one tile program loaded at a
 * time; [encodeTiledShapes]: all of one shape's tiles in one call, for a staged encoder). With tile >= the side there
 * is one tile: the plain decode (encode).
 */
object Tiling {
    /** A decoded tile: [channels, h, w] row-major. */
    class Tile(val c: Int, val h: Int, val w: Int, val data: FloatArray)

    /** generation.decode.programs' key of a tile shape: "<h>x<w>" (latent cells). */
    fun shapeKey(h: Int, w: Int): String = h.toString() + "x" + w.toString()

    fun starts(size: Int, stride: Int): List<Int> = (0 until size step stride).toList()

    /** diffusers' blend_v, in place on `tile`: its first rows fade in from `above`'s last rows. */
    fun blendRows(above: Tile, tile: Tile, extent0: Int) {
        val extent = minOf(above.h, tile.h, extent0)
        for (y in 0 until extent) {
            val fa = (1.0 - y.toDouble() / extent).toFloat(); val fb = (y.toDouble() / extent).toFloat()
            for (ch in 0 until tile.c) for (x in 0 until tile.w) {
                val a = above.data[(ch * above.h + above.h - extent + y) * above.w + x]
                val k = (ch * tile.h + y) * tile.w + x
                tile.data[k] = a * fa + tile.data[k] * fb
            }
        }
    }

    /** diffusers' blend_h, in place on `tile`: its first columns fade in from `left`'s last columns. */
    fun blendCols(left: Tile, tile: Tile, extent0: Int) {
        val extent = minOf(left.w, tile.w, extent0)
        for (x in 0 until extent) {
            val fa = (1.0 - x.toDouble() / extent).toFloat(); val fb = (x.toDouble() / extent).toFloat()
            for (ch in 0 until tile.c) for (y in 0 until tile.h) {
                val a = left.data[(ch * left.h + y) * left.w + left.w - extent + x]
                val k = (ch * tile.h + y) * tile.w + x
                tile.data[k] = a * fa + tile.data[k] * fb
            }
        }
    }

    /** The distinct tile shapes (h, w) of a tiled run over an h x w input, in first-use order (tiling.py tile_shapes). */
    fun tileShapes(h: Int, w: Int, tile: Int, stride: Int): List<Pair<Int, Int>> {
        val shapes = ArrayList<Pair<Int, Int>>()
        for (i in starts(h, stride)) for (j in starts(w, stride)) {
            val shape = Pair(minOf(tile, h - i), minOf(tile, w - j))
            if (shape !in shapes) shapes.add(shape)
        }
        return shapes
    }

    /**
     * tiling.py run_tiled: x [c, h, w] cut into tiles of `tile` a side every `stride`; runTile(the tile's values
     * [c, th, tw], th, tw) -> its result; each result blended into its upper, then its left (already blended)
     * neighbour over `blend` rows / columns, its first `keep` rows and columns written to the [c', outH, outW] output
     * at (row, column) index x keep. byShape: every tile run first, all tiles of one shape after another in
     * [tileShapes]' order, and blended after (diffusers' order); otherwise tile by tile, two rows of results kept.
     */
    fun runTiled(x: FloatArray, c: Int, h: Int, w: Int, tile: Int, stride: Int, blend: Int, keep: Int, outH: Int,
                 outW: Int, byShape: Boolean, runTile: (FloatArray, Int, Int) -> Tile): Tile =
        runTiledShapes(x, c, h, w, tile, stride, blend, keep, outH, outW, byShape) { parts, th, tw ->
            parts.map { runTile(it, th, tw) } }

    /**
     * tiling.py run_tiled with run_shape: as [runTiled], but all tiles of one shape in one call, runShape(the tiles'
     * values [c, th, tw] in row-major order, th, tw) -> their results in that order, one call per shape in
     * [tileShapes]' order, blended after (a staged encoder runs each stage's program on every tile of the shape before
     * loading the next stage's). byShape false: tile by tile, each tile a call of its own, two rows of results kept.
     */
    fun runTiledShapes(x: FloatArray, c: Int, h: Int, w: Int, tile: Int, stride: Int, blend: Int, keep: Int, outH: Int,
                       outW: Int, byShape: Boolean = true, runShape: (List<FloatArray>, Int, Int) -> List<Tile>): Tile {
        val rows = starts(h, stride); val cols = starts(w, stride)
        val done = HashMap<Pair<Int, Int>, Tile>()
        if (byShape) for (shape in tileShapes(h, w, tile, stride)) {
            val at = ArrayList<Pair<Int, Int>>(); val parts = ArrayList<FloatArray>()
            for ((r, i) in rows.withIndex()) for ((k, j) in cols.withIndex()) {
                if (Pair(minOf(tile, h - i), minOf(tile, w - j)) == shape) {
                    at.add(Pair(r, k)); parts.add(cut(x, c, h, w, i, j, tile).first)
                }
            }
            val results = runShape(parts, shape.first, shape.second)
            require(results.size == parts.size) { "${results.size} results for the ${parts.size} ${shapeKey(shape.first, shape.second)} tiles" }
            for ((n, rk) in at.withIndex()) done[rk] = results[n]
        }
        var out: Tile? = null
        var above: List<Tile> = emptyList()
        for ((r, i) in rows.withIndex()) {
            val row = ArrayList<Tile>()
            for ((k, j) in cols.withIndex()) {
                val t: Tile
                if (byShape) t = done.remove(Pair(r, k))!! else {
                    val (part, th, tw) = cut(x, c, h, w, i, j, tile)
                    t = runShape(listOf(part), th, tw).single()
                }
                if (above.isNotEmpty()) blendRows(above[k], t, blend)
                if (row.isNotEmpty()) blendCols(row.last(), t, blend)
                row.add(t)
                val o = out ?: Tile(t.c, outH, outW, FloatArray(t.c * outH * outW)).also { out = it }
                val y0 = r * keep; val x0 = k * keep
                val ph = minOf(keep, t.h, outH - y0); val pw = minOf(keep, t.w, outW - x0)
                for (ch in 0 until t.c) for (y in 0 until ph) for (z in 0 until pw)
                    o.data[(ch * outH + y0 + y) * outW + x0 + z] = t.data[(ch * t.h + y) * t.w + z]
            }
            above = row
        }
        return out!!
    }

    /** The values [c, th, tw] of the tile at (i, j) of x [c, h, w], with th, tw (smaller at the far edges). */
    fun cut(x: FloatArray, c: Int, h: Int, w: Int, i: Int, j: Int, tile: Int): Triple<FloatArray, Int, Int> {
        val th = minOf(tile, h - i); val tw = minOf(tile, w - j)
        val part = FloatArray(c * th * tw) { q -> val ch = q / (th * tw); val y = q / tw % th; val z = q % tw
            x[(ch * h + i + y) * w + j + z] }
        return Triple(part, th, tw)
    }

    /** latents [1, c, h, w] -> image [1, 3, h scale, w scale] as a [3, H, W] Tile; decodeTile(latents of one tile,
     *  its h, its w) -> the decoded tile. Tile by tile (Generator.kt: the tiles' programs take mapped weights). */
    fun decodeTiled(latents: FloatArray, c: Int, h: Int, w: Int, tile: Int, stride: Int, scale: Int,
                    decodeTile: (FloatArray, Int, Int) -> Tile): Tile =
        runTiled(latents, c, h, w, tile, stride, (tile - stride) * scale, stride * scale, h * scale, w * scale,
                 false, decodeTile)

    /** tiling.py encode_tiled: patch [1, 3, h, w] (pixels) -> latents [1, C, h / scale, w / scale] as a Tile;
     *  encodeTile(the pixels of one tile [3, th, tw], th, tw) -> its latents [C, th / scale, tw / scale]. tilePx,
     *  stridePx, h and w are multiples of scale. byShape (the default, forward.py's): the tiles of one shape in a
     *  row, so each shape's program is loaded once. */
    fun encodeTiled(patch: FloatArray, h: Int, w: Int, tilePx: Int, stridePx: Int, scale: Int, byShape: Boolean = true,
                    encodeTile: (FloatArray, Int, Int) -> Tile): Tile =
        runTiled(patch, 3, h, w, tilePx, stridePx, (tilePx - stridePx) / scale, stridePx / scale, h / scale,
                 w / scale, byShape, encodeTile)

    /** tiling.py encode_tiled with encode_shape: as [encodeTiled], but encodeShape(the pixels of every tile of one
     *  shape [3, th, tw], row-major, th, tw) -> their latents, one call per tile shape in [tileShapes]' order
     *  (SubjectStage.encodeShape: a staged encoder's stages each run on all the shape's tiles, one loaded at a time). */
    fun encodeTiledShapes(patch: FloatArray, h: Int, w: Int, tilePx: Int, stridePx: Int, scale: Int,
                          encodeShape: (List<FloatArray>, Int, Int) -> List<Tile>): Tile =
        runTiledShapes(patch, 3, h, w, tilePx, stridePx, (tilePx - stridePx) / scale, stridePx / scale, h / scale,
                       w / scale, true, encodeShape)
}
