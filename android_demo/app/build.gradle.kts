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
        ndk { abiFilters += listOf("arm64-v8a", "x86_64") }
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
    // ExecuTorch Android (Kotlin/Java API + JNI). The training classes (org.pytorch.executorch.training.*) need an
    // AAR built with EXECUTORCH_BUILD_EXTENSION_TRAINING=ON; if the Maven AAR lacks them, build it (README) and
    // pass -PuseLocalAar=true with the file at app/libs/executorch.aar.
    if (project.findProperty("useLocalAar") == "true") {
        implementation(files("libs/executorch.aar"))
        implementation("com.facebook.fbjni:fbjni:0.5.1")
        implementation("com.facebook.soloader:nativeloader:0.10.5")
    } else {
        implementation("org.pytorch:executorch-android:1.0.1")
    }
    implementation("androidx.core:core-ktx:1.13.1")
    implementation("androidx.activity:activity-ktx:1.9.2")
    implementation("androidx.appcompat:appcompat:1.7.0")
    implementation("androidx.lifecycle:lifecycle-runtime-ktx:2.8.6")
    implementation("org.jetbrains.kotlinx:kotlinx-coroutines-android:1.8.1")
    testImplementation("junit:junit:4.13.2")
}
