// Compile-only stubs of the ExecuTorch Android API signatures used by the app (host type-check only).
package org.pytorch.executorch
import java.nio.Buffer
import java.nio.ByteBuffer
import java.nio.FloatBuffer
abstract class Tensor {
    fun shape(): LongArray = TODO()
    open val dataAsFloatArray: FloatArray get() = TODO()
    open fun getRawDataBuffer(): Buffer = TODO()
    companion object {
        @JvmStatic fun fromBlob(data: FloatArray, shape: LongArray): Tensor = TODO()
        @JvmStatic fun fromBlob(data: LongArray, shape: LongArray): Tensor = TODO()
        @JvmStatic fun fromBlob(data: ByteArray, shape: LongArray): Tensor = TODO()
        @JvmStatic fun fromBlobUnsigned(data: ByteArray, shape: LongArray): Tensor = TODO()
        // direct-buffer variants (the buffer must be direct and in native order): a memory-mapped file is direct
        @JvmStatic fun fromBlob(data: FloatBuffer, shape: LongArray): Tensor = TODO()
        @JvmStatic fun fromBlob(data: ByteBuffer, shape: LongArray): Tensor = TODO()
        @JvmStatic fun fromBlobUnsigned(data: ByteBuffer, shape: LongArray): Tensor = TODO()
    }
}
class EValue {
    fun toTensor(): Tensor = TODO()
    companion object { @JvmStatic fun from(t: Tensor): EValue = TODO() }
}
class Module {
    fun forward(vararg inputs: EValue): Array<EValue> = TODO()
    fun destroy() {}
    companion object { @JvmStatic fun load(modelPath: String): Module = TODO() }
}
