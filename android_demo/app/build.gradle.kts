plugins {
    id("com.android.application")
    id("org.jetbrains.kotlin.android")
}

android {
    namespace = "org.ditskip.demo"
    compileSdk = 34
    defaultConfig {
        applicationId = "org.ditskip.demo"
        minSdk = 28
        targetSdk = 34
        versionCode = 1
        versionName = "0.1.0"
        ndk { abiFilters += listOf("arm64-v8a") }      // the ABI ExecuTorch was built for (README)
        externalNativeBuild {
            cmake {
                // the native core and its JNI library (device_runtime/bindings) against ExecuTorch's C++ libraries
                // built with the NDK for arm64-v8a (README): -PexecutorchRoot=DIR, DIR holding include/ and lib/
                arguments += listOf("-DEXECUTORCH_ROOT=${project.findProperty("executorchRoot") ?: ""}",
                                    "-DANDROID_STL=c++_shared")
                targets += listOf("ditskip_jni")
            }
        }
    }
    externalNativeBuild {
        cmake {
            path = file("../../device_runtime/CMakeLists.txt")
            version = "3.22.1"
        }
    }
    buildTypes {
        release { isMinifyEnabled = false }
    }
    compileOptions {
        sourceCompatibility = JavaVersion.VERSION_17
        targetCompatibility = JavaVersion.VERSION_17
    }
    kotlinOptions { jvmTarget = "17" }
    // Bundles are large binary files: never compress them if one is shipped as an asset.
    androidResources { noCompress += listOf("pte", "ptd", "onnx", "safetensors", "bin") }
}

dependencies {
    implementation("androidx.core:core-ktx:1.13.1")
    implementation("androidx.activity:activity-ktx:1.9.2")
    implementation("androidx.appcompat:appcompat:1.7.0")
    implementation("androidx.lifecycle:lifecycle-runtime-ktx:2.8.6")
    implementation("org.jetbrains.kotlinx:kotlinx-coroutines-android:1.8.1")
}
