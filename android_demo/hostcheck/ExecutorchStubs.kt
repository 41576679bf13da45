// Compile-only stubs of the ExecuTorch Android API signatures used by the app (host type-check only).
package org.pytorch.executorch
import java.nio.Buffer
abstract class Tensor {
    fun shape(): LongArray = TODO()
    open val dataAsFloatArray: FloatArray get() = TODO()
    open fun getRawDataBuffer(): Buffer = TODO()
    companion object {
        @JvmStatic fun fromBlob(data: FloatArray, shape: LongArray): Tensor = TODO()
        @JvmStatic fun fromBlob(data: ByteArray, shape: LongArray): Tensor = TODO()
        @JvmStatic fun fromBlobUnsigned(data: ByteArray, shape: LongArray): Tensor = TODO()
    }
}
class EValue {
    fun toTensor(): Tensor = TODO()
    companion object { @JvmStatic fun from(t: Tensor): EValue = TODO() }
}
