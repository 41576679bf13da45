// Compile-only stub (host type-check only).
package android.os
object Debug { @JvmStatic fun getNativeHeapAllocatedSize(): Long = TODO() }
