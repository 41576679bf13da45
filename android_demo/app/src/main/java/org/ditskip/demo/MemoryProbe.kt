package org.ditskip.demo

import android.os.Debug
import java.io.File

/** Resident memory of this process, as the handset scripts pull it: /proc/self/status (VmRSS, VmHWM) and the native
 *  heap. VmHWM is the kernel's exact high-water mark; samples are taken once per training step. */
object MemoryProbe {
    data class Reading(val rssBytes: Long, val hwmBytes: Long, val nativeHeapBytes: Long)

    fun read(): Reading {
        var rss = 0L; var hwm = 0L
        File("/proc/self/status").forEachLine { line ->
            if (line.startsWith("VmRSS:")) rss = line.split(Regex("\\s+"))[1].toLong() * 1024
            if (line.startsWith("VmHWM:")) hwm = line.split(Regex("\\s+"))[1].toLong() * 1024
        }
        return Reading(rss, hwm, Debug.getNativeHeapAllocatedSize())
    }
}
