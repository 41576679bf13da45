// An Objective-C facade over executorch::extension::Module (C++) for the generation programs (inference only).
// Inputs are DSTensorInput (bytes the caller owns) or DSMappedInput (a tensor inside a DSMappedFile: the runtime
// reads the mapping in place, no copy: the block programs' inputs are unplanned, so ExecuTorch points at them).
#import <Foundation/Foundation.h>
#import "ETTrainingBridge.h"

NS_ASSUME_NONNULL_BEGIN

/// A file mapped read-only (mmap PROT_READ, MAP_PRIVATE): clean, file-backed pages the phone does not count.
@interface DSMappedFile : NSObject
- (nullable instancetype)initWithPath:(NSString *)path error:(NSError **)error;
@property(nonatomic, readonly) NSUInteger length;
@end

/// A tensor at a byte offset of a mapped file.
@interface DSMappedInput : NSObject
- (instancetype)initWithFile:(DSMappedFile *)file offset:(NSUInteger)offset dtype:(NSString *)dtype
                       shape:(NSArray<NSNumber *> *)shape;
@end

/// One output, copied out of the runtime's memory (float32).
@interface DSTensorOutput : NSObject
@property(nonatomic, readonly) NSData *floats;
@property(nonatomic, readonly) NSArray<NSNumber *> *shape;
@end

@interface DSModule : NSObject
/// Loads an inference .pte (bundle programs/executorch/generation/...), mapped.
- (nullable instancetype)initWithPath:(NSString *)path error:(NSError **)error;
/// Runs method "forward"; inputs are DSTensorInput or DSMappedInput in the program's order.
- (nullable NSArray<DSTensorOutput *> *)forward:(NSArray *)inputs error:(NSError **)error;
@end

NS_ASSUME_NONNULL_END
