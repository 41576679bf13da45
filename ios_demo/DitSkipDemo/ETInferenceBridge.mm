#import "ETInferenceBridge.h"

#include <executorch/extension/module/module.h>
#include <executorch/extension/tensor/tensor.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <memory>
#include <vector>

using executorch::extension::Module;
using executorch::extension::TensorPtr;
using executorch::extension::from_blob;
using executorch::runtime::EValue;
using executorch::runtime::Error;

static NSError *DSInferenceError(NSString *what, Error code) {
  return [NSError errorWithDomain:@"org.ditskip.executorch" code:(NSInteger)code
                         userInfo:@{NSLocalizedDescriptionKey : [NSString stringWithFormat:@"%@ (ExecuTorch error 0x%x)", what, (unsigned)code]}];
}

static bool DSScalarType(NSString *dtype, executorch::aten::ScalarType *type, size_t *itemsize) {
  if ([dtype isEqualToString:@"float32"]) { *type = executorch::aten::ScalarType::Float; *itemsize = 4; return true; }
  if ([dtype isEqualToString:@"int8"]) { *type = executorch::aten::ScalarType::Char; *itemsize = 1; return true; }
  if ([dtype isEqualToString:@"uint8"]) { *type = executorch::aten::ScalarType::Byte; *itemsize = 1; return true; }
  if ([dtype isEqualToString:@"int64"]) { *type = executorch::aten::ScalarType::Long; *itemsize = 8; return true; }
  return false;
}

@implementation DSMappedFile {
  void *_base;
  NSUInteger _length;
}
- (nullable instancetype)initWithPath:(NSString *)path error:(NSError **)error {
  if ((self = [super init])) {
    int fd = open(path.fileSystemRepresentation, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
      if (fd >= 0) close(fd);
      if (error) *error = DSInferenceError([NSString stringWithFormat:@"cannot open %@", path], Error::AccessFailed);
      return nil;
    }
    _length = (NSUInteger)st.st_size;
    _base = mmap(nullptr, _length, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (_base == MAP_FAILED) {
      if (error) *error = DSInferenceError([NSString stringWithFormat:@"cannot map %@", path], Error::AccessFailed);
      return nil;
    }
  }
  return self;
}
- (NSUInteger)length { return _length; }
- (void *)base { return _base; }
- (void)dealloc { if (_base && _base != MAP_FAILED) munmap(_base, _length); }
@end

@implementation DSMappedInput {
@public
  DSMappedFile *_file;
  NSUInteger _offset;
  NSString *_dtype;
  NSArray<NSNumber *> *_shape;
}
- (instancetype)initWithFile:(DSMappedFile *)file offset:(NSUInteger)offset dtype:(NSString *)dtype
                       shape:(NSArray<NSNumber *> *)shape {
  if ((self = [super init])) { _file = file; _offset = offset; _dtype = [dtype copy]; _shape = [shape copy]; }
  return self;
}
@end

@implementation DSTensorOutput {
  NSData *_floats;
  NSArray<NSNumber *> *_shape;
}
- (instancetype)initWithTensor:(const executorch::aten::Tensor &)t {
  if ((self = [super init])) {
    _floats = [NSData dataWithBytes:t.const_data_ptr<float>() length:(NSUInteger)t.numel() * sizeof(float)];
    NSMutableArray *shape = [NSMutableArray array];
    for (auto s : t.sizes()) [shape addObject:@(s)];
    _shape = shape;
  }
  return self;
}
- (NSData *)floats { return _floats; }
- (NSArray<NSNumber *> *)shape { return _shape; }
@end

@implementation DSModule {
  std::unique_ptr<Module> _module;
}
- (nullable instancetype)initWithPath:(NSString *)path error:(NSError **)error {
  if ((self = [super init])) {
    _module = std::make_unique<Module>(path.UTF8String, Module::LoadMode::Mmap);
    Error e = _module->load_method("forward");
    if (e != Error::Ok) {
      if (error) *error = DSInferenceError([NSString stringWithFormat:@"cannot load %@", path], e);
      return nil;
    }
  }
  return self;
}

- (nullable NSArray<DSTensorOutput *> *)forward:(NSArray *)inputs error:(NSError **)error {
  std::vector<TensorPtr> keep;          // the tensors must outlive the call
  std::vector<EValue> values;
  keep.reserve(inputs.count);
  for (id input in inputs) {
    NSString *dtype; NSArray<NSNumber *> *shape; void *data;
    if ([input isKindOfClass:[DSMappedInput class]]) {
      DSMappedInput *m = input;
      dtype = m->_dtype; shape = m->_shape; data = (char *)[m->_file base] + m->_offset;
    } else {
      DSTensorInput *t = input;
      dtype = t.dtype; shape = t.shape; data = (void *)t.bytes.bytes;
    }
    executorch::aten::ScalarType type; size_t itemsize;
    if (!DSScalarType(dtype, &type, &itemsize)) {
      if (error) *error = DSInferenceError([NSString stringWithFormat:@"input dtype %@ not supported", dtype], Error::InvalidArgument);
      return nil;
    }
    std::vector<executorch::aten::SizesType> sizes;
    for (NSNumber *s in shape) sizes.push_back((executorch::aten::SizesType)s.longLongValue);
    keep.push_back(from_blob(data, sizes, type));
    values.emplace_back(*keep.back());
  }
  auto result = _module->forward(values);
  if (!result.ok()) {
    if (error) *error = DSInferenceError(@"forward failed", result.error());
    return nil;
  }
  NSMutableArray *out = [NSMutableArray array];
  for (const auto &v : result.get()) [out addObject:[[DSTensorOutput alloc] initWithTensor:v.toTensor()]];
  return out;
}
@end
