#import "ETTrainingBridge.h"

#include <executorch/extension/data_loader/mmap_data_loader.h>
#include <executorch/extension/tensor/tensor.h>
#include <executorch/extension/training/module/training_module.h>

#include <memory>
#include <string>
#include <vector>

using executorch::extension::MmapDataLoader;
using executorch::extension::TensorPtr;
using executorch::extension::from_blob;
using executorch::extension::training::TrainingModule;
using executorch::runtime::EValue;
using executorch::runtime::Error;

static NSError *DSError(NSString *what, Error code) {
  return [NSError errorWithDomain:@"org.ditskip.executorch"
                             code:(NSInteger)code
                         userInfo:@{NSLocalizedDescriptionKey :
                                        [NSString stringWithFormat:@"%@ (ExecuTorch error 0x%x)", what, (unsigned)code]}];
}

@implementation DSTensorView {
  NSString *_name;
  float *_data;
  NSInteger _count;
  NSArray<NSNumber *> *_shape;
}
- (instancetype)initWithName:(NSString *)name tensor:(const executorch::aten::Tensor &)t {
  if ((self = [super init])) {
    _name = name;
    _data = t.mutable_data_ptr<float>();
    _count = (NSInteger)t.numel();
    NSMutableArray *shape = [NSMutableArray array];
    for (auto s : t.sizes()) [shape addObject:@(s)];
    _shape = shape;
  }
  return self;
}
- (NSString *)name { return _name; }
- (float *)data { return _data; }
- (NSInteger)count { return _count; }
- (NSArray<NSNumber *> *)shape { return _shape; }
@end

@implementation DSTensorInput
- (instancetype)initWithBytes:(NSData *)bytes dtype:(NSString *)dtype shape:(NSArray<NSNumber *> *)shape {
  if ((self = [super init])) {
    _bytes = [bytes copy];
    _dtype = [dtype copy];
    _shape = [shape copy];
  }
  return self;
}
@end

@implementation DSTrainingModule {
  std::unique_ptr<TrainingModule> _module;
}

- (nullable instancetype)initWithPath:(NSString *)path dataPath:(nullable NSString *)dataPath error:(NSError **)error {
  if ((self = [super init])) {
    // mapped, never locked: the frozen weights stay clean file-backed pages the system may drop
    auto loader = MmapDataLoader::from(path.UTF8String, MmapDataLoader::MlockConfig::NoMlock);
    if (!loader.ok()) {
      if (error) *error = DSError([NSString stringWithFormat:@"cannot open %@", path], loader.error());
      return nil;
    }
    std::unique_ptr<MmapDataLoader> data;
    if (dataPath != nil) {
      auto d = MmapDataLoader::from(dataPath.UTF8String, MmapDataLoader::MlockConfig::NoMlock);
      if (!d.ok()) {
        if (error) *error = DSError([NSString stringWithFormat:@"cannot open %@", dataPath], d.error());
        return nil;
      }
      data = std::make_unique<MmapDataLoader>(std::move(d.get()));
    }
    _module = std::make_unique<TrainingModule>(std::make_unique<MmapDataLoader>(std::move(loader.get())), nullptr,
                                               nullptr, nullptr, std::move(data));
  }
  return self;
}

- (nullable NSNumber *)forwardBackward:(NSString *)method
                                inputs:(NSArray<DSTensorInput *> *)inputs
                                 error:(NSError **)error {
  std::vector<TensorPtr> keep;        // the tensors must outlive the call
  std::vector<EValue> values;
  keep.reserve(inputs.count);
  for (DSTensorInput *input in inputs) {
    std::vector<executorch::aten::SizesType> sizes;
    for (NSNumber *s in input.shape) sizes.push_back((executorch::aten::SizesType)s.longLongValue);
    executorch::aten::ScalarType type;
    size_t itemsize;
    if ([input.dtype isEqualToString:@"float32"]) { type = executorch::aten::ScalarType::Float; itemsize = 4; }
    else if ([input.dtype isEqualToString:@"int8"]) { type = executorch::aten::ScalarType::Char; itemsize = 1; }
    else if ([input.dtype isEqualToString:@"uint8"]) { type = executorch::aten::ScalarType::Byte; itemsize = 1; }
    else {
      if (error) *error = DSError([NSString stringWithFormat:@"input dtype %@ not supported", input.dtype], Error::InvalidArgument);
      return nil;
    }
    size_t numel = 1;
    for (auto s : sizes) numel *= (size_t)s;
    if (input.bytes.length != numel * itemsize) {
      if (error) *error = DSError([NSString stringWithFormat:@"input of %lu bytes for %zu %@ values",
                                   (unsigned long)input.bytes.length, numel, input.dtype], Error::InvalidArgument);
      return nil;
    }
    keep.push_back(from_blob((void *)input.bytes.bytes, sizes, type));
    values.emplace_back(*keep.back());
  }
  auto result = _module->execute_forward_backward(method.UTF8String, values);
  if (!result.ok()) {
    if (error) *error = DSError(@"forward-backward failed", result.error());
    return nil;
  }
  return @(result.get()[0].toTensor().const_data_ptr<float>()[0]);
}

- (nullable NSDictionary<NSString *, DSTensorView *> *)views:(bool)parameters
                                                      method:(NSString *)method
                                                       error:(NSError **)error {
  auto result = parameters ? _module->named_parameters(method.UTF8String) : _module->named_gradients(method.UTF8String);
  if (!result.ok()) {
    if (error) *error = DSError(parameters ? @"named_parameters failed" : @"named_gradients failed", result.error());
    return nil;
  }
  NSMutableDictionary *out = [NSMutableDictionary dictionary];
  for (const auto &kv : result.get()) {
    NSString *name = [[NSString alloc] initWithBytes:kv.first.data() length:kv.first.size() encoding:NSUTF8StringEncoding];
    out[name] = [[DSTensorView alloc] initWithName:name tensor:kv.second];
  }
  return out;
}

- (nullable NSDictionary<NSString *, DSTensorView *> *)namedParameters:(NSString *)method error:(NSError **)error {
  return [self views:true method:method error:error];
}

- (nullable NSDictionary<NSString *, DSTensorView *> *)namedGradients:(NSString *)method error:(NSError **)error {
  return [self views:false method:method error:error];
}
@end
