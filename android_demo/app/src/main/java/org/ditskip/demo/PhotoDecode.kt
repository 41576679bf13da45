package org.ditskip.demo

import android.content.ContentResolver
import android.graphics.Bitmap
import android.graphics.ImageDecoder
import android.net.Uri
import android.provider.OpenableColumns
import java.io.File
import java.nio.ByteBuffer
import java.security.MessageDigest

/**
 * The picked photos -> the subject stage's photos, on the phone (runtime/photos.py `load_photos` + schedule.py
 * `check_photo_sizes`): each photo's bytes read once (the SHA-256 the run identity holds is of those bytes), decoded
 * with ImageDecoder (software bitmap, ARGB_8888, EXIF orientation applied by the decoder, alpha not premultiplied so
 * a transparent PNG keeps its stored RGB as Pillow's convert("RGB") does; the pixels read raw with copyPixelsToBuffer,
 * not getPixels, which converts to sRGB), checked for size, normalised by PhotoNormalise to the model bundle's data
 * resolution (s_max_px) and sorted by file name. Differences from Pillow (not checked: no handset here): Android's
 * decoders give their own pixels for JPEG / HEIC, and Pillow does not apply EXIF orientation. Errors are one line
 * (IllegalArgumentException). Not compiled here (Android classes).
 */
object PhotoDecode {
    const val MAX_PHOTO_PIXELS = 64000000L          // photos.py MAX_PHOTO_PIXELS
    const val MAX_ASPECT = 4.0                       // schedule.py MAX_ASPECT
    const val MIN_SHORT_SIDE_FRACTION = 0.5          // schedule.py MIN_SHORT_SIDE_FRACTION

    /** The file name the picker gives (OpenableColumns.DISPLAY_NAME), else the URI's last segment. */
    fun displayName(resolver: ContentResolver, uri: Uri): String {
        try {
            resolver.query(uri, arrayOf(OpenableColumns.DISPLAY_NAME), null, null, null)?.use { c ->
                val i = c.getColumnIndex(OpenableColumns.DISPLAY_NAME)
                if (c.moveToFirst() && i >= 0 && !c.isNull(i)) return c.getString(i)
            }
        } catch (e: Exception) {
        }
        return uri.lastPathSegment ?: uri.toString()
    }

    /** One photo: name, SHA-256 of its bytes, and its decoded RGB [h, w, 3] uint8 (orientation applied). */
    class Decoded(val name: String, val sha256: String, val h: Int, val w: Int, val rgb: ByteArray)

    fun decode(resolver: ContentResolver, uri: Uri): Decoded {
        val name = displayName(resolver, uri)
        val bytes = try {
            resolver.openInputStream(uri)?.use { it.readBytes() }
        } catch (e: Exception) {
            throw IllegalArgumentException("$name: cannot be read (${e.javaClass.simpleName}: ${e.message})")
        } ?: throw IllegalArgumentException("$name: cannot be read")
        val sha = CacheWriter.hex(MessageDigest.getInstance("SHA-256").digest(bytes))
        val decoded = try {
            ImageDecoder.decodeBitmap(ImageDecoder.createSource(ByteBuffer.wrap(bytes))) { d, info, _ ->
                val sw = info.size.width; val sh = info.size.height
                if (sw.toLong() * sh > MAX_PHOTO_PIXELS) {
                    throw IllegalArgumentException("$name: ${sw}x$sh px is beyond ${MAX_PHOTO_PIXELS / 1000000} megapixels")
                }
                d.allocator = ImageDecoder.ALLOCATOR_SOFTWARE
                d.isUnpremultipliedRequired = true
            }
        } catch (e: IllegalArgumentException) {
            throw e
        } catch (e: OutOfMemoryError) {
            throw e
        } catch (e: Exception) {
            throw IllegalArgumentException("$name: cannot be read as an image (${e.javaClass.simpleName}: ${e.message})")
        }
        val bmp = if (decoded.config == Bitmap.Config.ARGB_8888) decoded else decoded.copy(Bitmap.Config.ARGB_8888, false)
        if (bmp !== decoded) decoded.recycle()
        val w = bmp.width; val h = bmp.height
        val buf = ByteBuffer.allocate(bmp.rowBytes * h)
        bmp.copyPixelsToBuffer(buf)                               // ARGB_8888 in memory: R, G, B, A bytes
        bmp.recycle()
        val raw = buf.array()
        val row = raw.size / h
        val rgb = ByteArray(3 * w * h)
        for (y in 0 until h) for (x in 0 until w) {
            val o = y * row + 4 * x; val p = (y * w + x) * 3
            rgb[p] = raw[o]; rgb[p + 1] = raw[o + 1]; rgb[p + 2] = raw[o + 2]
        }
        return Decoded(name, sha, h, w, rgb)
    }

    /** schedule.py check_photo_sizes (on the file's size, before normalisation). */
    fun checkSize(cfg: ScheduleConfig, name: String, h: Int, w: Int) {
        val minShort = Math.max(cfg.multiplePx, Math.ceil(MIN_SHORT_SIDE_FRACTION * cfg.sMinPx).toInt())
        val short = Math.min(h, w); val long = Math.max(h, w)
        require(short >= minShort) {
            "photo $name is ${w}x$h px: its short side must be at least $minShort px (half the train resolution ${cfg.sMinPx} px)"
        }
        require(long <= MAX_ASPECT * short) {
            "photo $name is ${w}x$h px: aspect ratio ${"%.1f".format(long.toDouble() / short)}:1 is beyond 4:1; crop it first"
        }
    }

    /** The picked photos as the subject stage takes them: decoded one at a time, normalised to `cfg.sMaxPx`, sorted by
     *  file name (then hash, so the order, and the run identity, do not depend on the picking order). */
    fun load(resolver: ContentResolver, uris: List<Uri>, cfg: ScheduleConfig, progress: (Int, Int) -> Unit): List<SubjectPhoto> {
        val out = ArrayList<SubjectPhoto>()
        for ((i, uri) in uris.withIndex()) {
            val d = decode(resolver, uri)
            checkSize(cfg, d.name, d.h, d.w)
            out.add(PhotoNormalise.photo(d.name, d.sha256, d.rgb, d.h, d.w, cfg.sMaxPx))
            progress(i + 1, uris.size)
        }
        return out.sortedWith(compareBy<SubjectPhoto>({ it.name }, { it.sha256 }))
    }
}

/** subject/photos/NNN.png through Bitmap.compress (opaque ARGB_8888, lossless: the pixels are the normalised ones). */
object BitmapPngWriter : PngWriter {
    override fun write(rgb: ByteArray, h: Int, w: Int, out: File) {
        val colors = IntArray(h * w) { p ->
            (0xFF shl 24) or ((rgb[3 * p].toInt() and 0xFF) shl 16) or ((rgb[3 * p + 1].toInt() and 0xFF) shl 8) or
                (rgb[3 * p + 2].toInt() and 0xFF)
        }
        val bmp = Bitmap.createBitmap(colors, w, h, Bitmap.Config.ARGB_8888)
        try {
            val ok = out.outputStream().use { bmp.compress(Bitmap.CompressFormat.PNG, 100, it) }
            require(ok) { "$out: PNG encoding failed" }
        } finally {
            bmp.recycle()
        }
    }
}
