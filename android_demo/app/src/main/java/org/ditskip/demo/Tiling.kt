package org.ditskip.demo

/**
 * Decoding latents in tiles, line for line ditskip_edge/runtime/tiling.py (diffusers' tiled_decode): tiles start every
 * `stride` latent cells (smaller at the far edges); each decoded tile is blended into its upper, then its left
 * (already blended) neighbour over (tile - stride) * scale pixels, and its first stride * scale rows and columns go to
 * the picture. With tile >= the latent side there is one tile: the plain decode.
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

    /** latents [1, c, h, w] -> image [1, 3, h scale, w scale] as a [3, H, W] Tile; decodeTile(latents of one tile,
     *  its h, its w) -> the decoded tile. */
    fun decodeTiled(latents: FloatArray, c: Int, h: Int, w: Int, tile: Int, stride: Int, scale: Int,
                    decodeTile: (FloatArray, Int, Int) -> Tile): Tile {
        val blend = (tile - stride) * scale; val keep = stride * scale
        var image: Tile? = null
        var above: List<Tile> = emptyList()
        for (i in starts(h, stride)) {
            val row = ArrayList<Tile>()
            for ((k, j) in starts(w, stride).withIndex()) {
                val th = minOf(tile, h - i); val tw = minOf(tile, w - j)
                val part = FloatArray(c * th * tw) { q -> val ch = q / (th * tw); val y = q / tw % th; val x = q % tw
                    latents[(ch * h + i + y) * w + j + x] }
                val t = decodeTile(part, th, tw)
                if (above.isNotEmpty()) blendRows(above[k], t, blend)
                if (row.isNotEmpty()) blendCols(row.last(), t, blend)
                row.add(t)
                val img = image ?: Tile(t.c, h * scale, w * scale, FloatArray(t.c * h * scale * w * scale)).also { image = it }
                val ph = minOf(keep, t.h); val pw = minOf(keep, t.w)
                for (ch in 0 until t.c) for (y in 0 until ph) for (x in 0 until pw)
                    img.data[(ch * img.h + i * scale + y) * img.w + j * scale + x] = t.data[(ch * t.h + y) * t.w + x]
            }
            above = row
        }
        return image!!
    }
}
