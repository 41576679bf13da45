// ditskip_jni.cpp: the Android binding. Plain JNI functions over the C API (ditskip.h), nothing else of the core.
// Kotlin side: android_demo/app/src/main/java/org/ditskip/demo/DitskipRuntime.kt (object DitskipNative), which
// serializes every call behind one lock; ditskip_trainer_cancel is the one call that may come from another thread.
//
// Handles cross as jlong. A trainer handle is a JniTrainer (the core's trainer plus what its progress callback needs:
// the Kotlin listener as a global reference and the JNIEnv of the thread running it). Errors become a thrown
// org.ditskip.demo.DitskipException(status, ditskip_last_error()).
#include <jni.h>

#include <cstdint>
#include <string>

#include "ditskip/ditskip.h"

#ifdef __ANDROID__
#include <android/log.h>
#endif

namespace {

constexpr const char* kException = "org/ditskip/demo/DitskipException";

// Throws DitskipException(status, message) into Kotlin; the JNI function then returns at once.
void throw_status(JNIEnv* env, int status, const std::string& message) {
  jclass cls = env->FindClass(kException);
  if (cls == nullptr) return;  // NoClassDefFoundError is pending
  jmethodID ctor = env->GetMethodID(cls, "<init>", "(ILjava/lang/String;)V");
  if (ctor == nullptr) return;
  jstring msg = env->NewStringUTF(message.c_str());
  auto* err = static_cast<jthrowable>(env->NewObject(cls, ctor, static_cast<jint>(status), msg));
  if (err != nullptr) env->Throw(err);
}

void throw_last_error(JNIEnv* env, ditskip_status status) {
  const char* msg = ditskip_last_error();
  throw_status(env, status, msg != nullptr && *msg != '\0' ? msg : "ditskip: status " + std::to_string(status));
}

// A Kotlin String (or null) as std::string; `set` says whether it was non-null.
std::string utf8(JNIEnv* env, jstring s, bool* set) {
  *set = s != nullptr;
  if (s == nullptr) return {};
  const char* chars = env->GetStringUTFChars(s, nullptr);
  std::string out(chars != nullptr ? chars : "");
  if (chars != nullptr) env->ReleaseStringUTFChars(s, chars);
  return out;
}

// A string the core returned (caller frees) as a Kotlin String; null stays null.
jstring take_string(JNIEnv* env, char* s) {
  if (s == nullptr) return nullptr;
  jstring out = env->NewStringUTF(s);
  ditskip_string_free(s);
  return out;
}

struct JniTrainer {
  ditskip_trainer* trainer = nullptr;
  std::string run_dir, precision;  // the params' strings, alive as long as the trainer
  jobject listener = nullptr;      // global ref to a DitskipNative.Progress, or null
  jmethodID on_step = nullptr;
  JNIEnv* env = nullptr;           // the thread inside ditskip_trainer_run (set for the call's duration)
  jthrowable thrown = nullptr;     // global ref: the listener's exception, rethrown when the run returns
};

// The core's progress callback: Progress.onStep(step, total, loss) on the running thread. A listener that throws
// stops the run like a `false` (the core checkpoints and returns CANCELLED) and its exception is rethrown after.
bool on_progress(int32_t step, int32_t total, double loss, void* user_data) {
  auto* t = static_cast<JniTrainer*>(user_data);
  if (t->listener == nullptr || t->env == nullptr) return true;
  JNIEnv* env = t->env;
  jboolean go = env->CallBooleanMethod(t->listener, t->on_step, static_cast<jint>(step), static_cast<jint>(total),
                                       static_cast<jdouble>(loss));
  if (env->ExceptionCheck()) {
    jthrowable err = env->ExceptionOccurred();
    env->ExceptionClear();
    if (t->thrown == nullptr) t->thrown = static_cast<jthrowable>(env->NewGlobalRef(err));
    env->DeleteLocalRef(err);
    return false;
  }
  return go == JNI_TRUE;
}


// A subject stage or generation in progress: the Kotlin listener (StageProgress.onProgress(stage, done, total)) and
// the calling thread's JNIEnv, for the core's ditskip_stage_callback.
struct JniStage {
  JNIEnv* env = nullptr;
  jobject listener = nullptr;      // local ref (the call's duration), or null
  jmethodID on_progress = nullptr;
  jthrowable thrown = nullptr;     // local ref: the listener's exception, rethrown when the call returns
};

bool on_stage(const char* stage, int32_t done, int32_t total, void* user_data) {
  auto* s = static_cast<JniStage*>(user_data);
  if (s->listener == nullptr) return true;
  JNIEnv* env = s->env;
  jstring name = env->NewStringUTF(stage != nullptr ? stage : "");
  jboolean go = env->CallBooleanMethod(s->listener, s->on_progress, name, static_cast<jint>(done),
                                       static_cast<jint>(total));
  env->DeleteLocalRef(name);
  if (env->ExceptionCheck()) {
    jthrowable err = env->ExceptionOccurred();
    env->ExceptionClear();
    if (s->thrown == nullptr) s->thrown = err;
    return false;
  }
  return go == JNI_TRUE;
}

// Sets up `s` for `listener` (null: no callback); false when StageProgress.onProgress is missing (error pending).
bool stage_listener(JNIEnv* env, jobject listener, JniStage& s) {
  s.env = env;
  s.listener = listener;
  if (listener == nullptr) return true;
  s.on_progress = env->GetMethodID(env->GetObjectClass(listener), "onProgress", "(Ljava/lang/String;II)Z");
  return s.on_progress != nullptr;
}

// The call's end as Kotlin sees it: the listener's exception rethrown; OK / CANCELLED as a StageResult; any other
// status thrown as DitskipException.
jobject stage_result(JNIEnv* env, JniStage& s, ditskip_status st, char* summary) {
  if (s.thrown != nullptr) {
    ditskip_string_free(summary);
    env->Throw(s.thrown);
    return nullptr;
  }
  if (st != DITSKIP_OK && st != DITSKIP_CANCELLED) {
    ditskip_string_free(summary);
    throw_last_error(env, st);
    return nullptr;
  }
  jclass cls = env->FindClass("org/ditskip/demo/StageResult");
  if (cls == nullptr) {
    ditskip_string_free(summary);
    return nullptr;
  }
  jmethodID ctor = env->GetMethodID(cls, "<init>", "(ILjava/lang/String;)V");
  if (ctor == nullptr) {
    ditskip_string_free(summary);
    return nullptr;
  }
  return env->NewObject(cls, ctor, static_cast<jint>(st), take_string(env, summary));
}

// Runs call(callback, user_data, &summary) (a ditskip_personalize / ditskip_generate call) with the Kotlin listener
// wired in as its progress callback; the StageResult, or the exception.
template <typename Call>
jobject run_stage(JNIEnv* env, jobject listener, Call call) {
  JniStage s;
  if (!stage_listener(env, listener, s)) return nullptr;
  char* summary = nullptr;
  const ditskip_status st = call(listener != nullptr ? on_stage : nullptr, &s, &summary);
  return stage_result(env, s, st, summary);
}

#ifdef __ANDROID__
void to_logcat(int level, const char* message, void*) {
  __android_log_write(level == 0 ? ANDROID_LOG_INFO : ANDROID_LOG_WARN, "ditskip", message);
}
#endif

}  // namespace

extern "C" {

JNIEXPORT jint JNICALL JNI_OnLoad(JavaVM*, void*) {
#ifdef __ANDROID__
  ditskip_set_log_callback(to_logcat, nullptr);  // the library's messages to logcat (on the host: stderr)
#endif
  return JNI_VERSION_1_6;
}

JNIEXPORT jstring JNICALL Java_org_ditskip_demo_DitskipNative_version(JNIEnv* env, jclass) {
  return env->NewStringUTF(ditskip_version());
}

// ditskip_set_threads: the process's kernel thread pool, before any trainer or stage; a bad count is thrown.
JNIEXPORT void JNICALL Java_org_ditskip_demo_DitskipNative_setThreads(JNIEnv* env, jclass, jint threads) {
  ditskip_status st = ditskip_set_threads(threads);
  if (st != DITSKIP_OK) throw_last_error(env, st);
}

JNIEXPORT jint JNICALL Java_org_ditskip_demo_DitskipNative_threads(JNIEnv*, jclass) { return ditskip_threads(); }

JNIEXPORT jstring JNICALL Java_org_ditskip_demo_DitskipNative_lastError(JNIEnv* env, jclass) {
  const char* msg = ditskip_last_error();
  return env->NewStringUTF(msg != nullptr ? msg : "");
}

JNIEXPORT jlong JNICALL Java_org_ditskip_demo_DitskipNative_bundleOpen(JNIEnv* env, jclass, jstring dir,
                                                                        jboolean verify_files) {
  bool set = false;
  std::string path = utf8(env, dir, &set);
  ditskip_bundle* bundle = nullptr;
  ditskip_status st = ditskip_bundle_open(path.c_str(), verify_files == JNI_TRUE, &bundle);
  if (st != DITSKIP_OK) {
    throw_last_error(env, st);
    return 0;
  }
  return reinterpret_cast<jlong>(bundle);
}

JNIEXPORT void JNICALL Java_org_ditskip_demo_DitskipNative_bundleFree(JNIEnv*, jclass, jlong bundle) {
  ditskip_bundle_free(reinterpret_cast<ditskip_bundle*>(bundle));
}

JNIEXPORT jstring JNICALL Java_org_ditskip_demo_DitskipNative_bundleManifestJson(JNIEnv* env, jclass, jlong bundle) {
  char* json = ditskip_bundle_manifest_json(reinterpret_cast<ditskip_bundle*>(bundle));
  if (json == nullptr) {
    throw_last_error(env, DITSKIP_INTERNAL_ERROR);
    return nullptr;
  }
  return take_string(env, json);
}

// Numbers < 0 and tri-state booleans < 0 keep ditskip_train_default_params()'s value: the defaults live in the core.
JNIEXPORT jlong JNICALL Java_org_ditskip_demo_DitskipNative_trainerCreate(
    JNIEnv* env, jclass, jlong bundle, jstring run_dir, jstring precision, jint steps, jint checkpoint_every,
    jint resume, jint device_preprocess, jint stop_after, jlong budget_anon_bytes, jobject listener) {
  auto* t = new JniTrainer();
  ditskip_train_params p = ditskip_train_default_params();
  bool set = false;
  t->run_dir = utf8(env, run_dir, &set);
  if (set) p.run_dir = t->run_dir.c_str();
  t->precision = utf8(env, precision, &set);
  if (set) p.precision = t->precision.c_str();
  if (steps >= 0) p.steps = steps;
  if (checkpoint_every >= 0) p.checkpoint_every = checkpoint_every;
  if (resume >= 0) p.resume = resume != 0;
  if (device_preprocess >= 0) p.device_preprocess = device_preprocess != 0;
  if (stop_after >= 0) p.stop_after = stop_after;
  if (budget_anon_bytes >= 0) p.budget_anon_bytes = budget_anon_bytes;
  if (listener != nullptr) {
    t->listener = env->NewGlobalRef(listener);
    t->on_step = env->GetMethodID(env->GetObjectClass(listener), "onStep", "(IID)Z");
    if (t->on_step == nullptr) {  // NoSuchMethodError is pending
      env->DeleteGlobalRef(t->listener);
      delete t;
      return 0;
    }
    p.progress = on_progress;
    p.progress_user_data = t;
  }
  ditskip_status st = ditskip_trainer_create(reinterpret_cast<ditskip_bundle*>(bundle), &p, &t->trainer);
  if (st != DITSKIP_OK) {
    throw_last_error(env, st);
    if (t->listener != nullptr) env->DeleteGlobalRef(t->listener);
    delete t;
    return 0;
  }
  return reinterpret_cast<jlong>(t);
}

// Runs on the caller's thread. Returns DITSKIP_OK or DITSKIP_CANCELLED; any other status is thrown.
JNIEXPORT jint JNICALL Java_org_ditskip_demo_DitskipNative_trainerRun(JNIEnv* env, jclass, jlong handle) {
  auto* t = reinterpret_cast<JniTrainer*>(handle);
  t->env = env;
  ditskip_status st = ditskip_trainer_run(t->trainer);
  t->env = nullptr;
  if (t->thrown != nullptr) {  // the listener threw: its exception, not CANCELLED
    auto* err = static_cast<jthrowable>(env->NewLocalRef(t->thrown));
    env->DeleteGlobalRef(t->thrown);
    t->thrown = nullptr;
    env->Throw(err);
    return st;
  }
  if (st != DITSKIP_OK && st != DITSKIP_CANCELLED) throw_last_error(env, st);
  return st;
}

JNIEXPORT jstring JNICALL Java_org_ditskip_demo_DitskipNative_trainerSummaryJson(JNIEnv* env, jclass, jlong handle) {
  return take_string(env, ditskip_trainer_summary_json(reinterpret_cast<JniTrainer*>(handle)->trainer));
}

JNIEXPORT void JNICALL Java_org_ditskip_demo_DitskipNative_trainerCancel(JNIEnv*, jclass, jlong handle) {
  ditskip_trainer_cancel(reinterpret_cast<JniTrainer*>(handle)->trainer);
}

JNIEXPORT void JNICALL Java_org_ditskip_demo_DitskipNative_trainerFree(JNIEnv* env, jclass, jlong handle) {
  auto* t = reinterpret_cast<JniTrainer*>(handle);
  if (t == nullptr) return;
  ditskip_trainer_free(t->trainer);
  if (t->listener != nullptr) env->DeleteGlobalRef(t->listener);
  if (t->thrown != nullptr) env->DeleteGlobalRef(t->thrown);
  delete t;
}

// The subject stage (ditskip_personalize). Strings null and tri-state booleans / numbers < 0 keep the core's
// defaults (ditskip_personalize_default_params). Runs on the caller's thread.
JNIEXPORT jobject JNICALL Java_org_ditskip_demo_DitskipNative_personalize(
    JNIEnv* env, jclass, jstring model_dir, jstring photos_dir, jstring out_dir, jstring prompt, jstring cache_mode,
    jint resume, jint overwrite, jint keep_blocks, jint stop_after, jobject listener) {
  ditskip_personalize_params p = ditskip_personalize_default_params();
  bool set = false;
  const std::string model = utf8(env, model_dir, &set), photos = utf8(env, photos_dir, &set);
  const std::string out = utf8(env, out_dir, &set);
  if (set) p.out_dir = out.c_str();
  const std::string text = utf8(env, prompt, &set);
  if (set) p.prompt = text.c_str();
  const std::string mode = utf8(env, cache_mode, &set);
  if (set) p.cache_mode = mode.c_str();
  if (resume >= 0) p.resume = resume != 0;
  if (overwrite >= 0) p.overwrite = overwrite != 0;
  if (keep_blocks >= 0) p.keep_blocks = keep_blocks != 0;
  if (stop_after >= 0) p.stop_after = stop_after;
  return run_stage(env, listener, [&](ditskip_stage_callback callback, void* user_data, char** summary) {
    p.progress = callback;
    p.progress_user_data = user_data;
    return ditskip_personalize(model.c_str(), photos.c_str(), &p, summary);
  });
}

// Generation (ditskip_generate). steps <= 0 and guidance < 0 keep the bundle's defaults; lora / precision null: none /
// the first listed. Runs on the caller's thread.
JNIEXPORT jobject JNICALL Java_org_ditskip_demo_DitskipNative_generate(
    JNIEnv* env, jclass, jstring bundle_dir, jstring prompt, jlong seed, jint steps, jdouble guidance, jstring lora,
    jstring precision, jstring out_png, jobject listener) {
  ditskip_generate_params p = ditskip_generate_default_params();
  bool set = false;
  const std::string bundle = utf8(env, bundle_dir, &set);
  const std::string text = utf8(env, prompt, &set);
  p.prompt = text.c_str();
  p.seed = static_cast<uint64_t>(seed);
  if (steps > 0) p.steps = steps;
  if (guidance >= 0) p.guidance = guidance;
  const std::string lora_path = utf8(env, lora, &set);
  if (set) p.lora = lora_path.c_str();
  const std::string prec = utf8(env, precision, &set);
  if (set) p.precision = prec.c_str();
  const std::string out = utf8(env, out_png, &set);
  p.out_png = out.c_str();
  return run_stage(env, listener, [&](ditskip_stage_callback callback, void* user_data, char** summary) {
    p.progress = callback;
    p.progress_user_data = user_data;
    return ditskip_generate(bundle.c_str(), &p, summary);
  });
}

// [RssAnon, RssFile] bytes of this process (-1 where the platform does not report it).
JNIEXPORT jlongArray JNICALL Java_org_ditskip_demo_DitskipNative_footprint(JNIEnv* env, jclass) {
  int64_t anon = -1, file = -1;
  ditskip_footprint(&anon, &file);
  jlong values[2] = {static_cast<jlong>(anon), static_cast<jlong>(file)};
  jlongArray out = env->NewLongArray(2);
  if (out != nullptr) env->SetLongArrayRegion(out, 0, 2, values);
  return out;
}

}  // extern "C"
