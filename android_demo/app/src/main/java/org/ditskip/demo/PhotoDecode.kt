package org.ditskip.demo

import android.content.ContentResolver
import android.graphics.Bitmap
import android.graphics.ImageDecoder
import android.net.Uri
import android.provider.OpenableColumns
import java.io.File

/**
 * The picked photos -> upright PNG files in one folder, what the subject stage takes (`--photos DIR`). The platform
 * part of photo handling: the picker's file name, and ImageDecoder's decode with the EXIF orientation applied (the core applies it
 * too, to files that reach it another way). Size checks, normalisation and everything after are the subject stage's. A photo that
 * cannot be read is refused in one line (IllegalArgumentException). Not compiled here (Android classes).
 */
object PhotoDecode {
    const val MAX_PHOTO_PIXELS = 64000000L          // runtime/photos.py MAX_PHOTO_PIXELS: refused before decoding

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

    /** One photo decoded upright (software ARGB_8888, alpha not premultiplied: a transparent PNG keeps its RGB). */
    fun decode(resolver: ContentResolver, uri: Uri, name: String): Bitmap = try {
        ImageDecoder.decodeBitmap(ImageDecoder.createSource(resolver, uri)) { d, info, _ ->
            val w = info.size.width; val h = info.size.height
            require(w.toLong() * h <= MAX_PHOTO_PIXELS) { "$name: ${w}x$h px is beyond ${MAX_PHOTO_PIXELS / 1000000} megapixels" }
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

    /** Writes each picked photo as DIR/<its name>.png (lossless, upright); returns the files. DIR is emptied first. */
    fun writeUpright(resolver: ContentResolver, uris: List<Uri>, dir: File, progress: (Int, Int) -> Unit): List<File> {
        dir.deleteRecursively()
        dir.mkdirs()
        val out = ArrayList<File>()
        for ((i, uri) in uris.withIndex()) {
            val name = displayName(resolver, uri)
            val stem = name.substringBeforeLast('.').replace(Regex("[^A-Za-z0-9._-]"), "_").ifEmpty { "photo" }
            var file = File(dir, "$stem.png")
            var n = 2
            while (file.exists()) file = File(dir, "$stem-${n++}.png")
            val bmp = decode(resolver, uri, name)
            try {
                val ok = file.outputStream().use { bmp.compress(Bitmap.CompressFormat.PNG, 100, it) }
                require(ok) { "$name: PNG encoding failed" }
            } finally {
                bmp.recycle()
            }
            out.add(file)
            progress(i + 1, uris.size)
        }
        return out
    }
}
