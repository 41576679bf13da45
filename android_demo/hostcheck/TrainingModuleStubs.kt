// Compile-only stubs of the ExecuTorch Android API signatures used by the app (host type-check only).
package org.pytorch.executorch.training
import org.pytorch.executorch.EValue
import org.pytorch.executorch.Tensor
class TrainingModule : java.io.Closeable {
    fun executeForwardBackward(methodName: String, vararg inputs: EValue): Array<EValue> = TODO()
    fun namedParameters(methodName: String): Map<String, Tensor> = TODO()
    fun namedGradients(methodName: String): Map<String, Tensor> = TODO()
    override fun close() {}
    companion object {
        @JvmStatic fun load(modelPath: String): TrainingModule = TODO()
        @JvmStatic fun load(modelPath: String, dataPath: String): TrainingModule = TODO()
    }
}
