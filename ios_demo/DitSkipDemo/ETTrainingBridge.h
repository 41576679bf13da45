// A small Objective-C facade over executorch::extension::training::TrainingModule (C++), which has no Swift or
// Objective-C binding of its own. Swift sees float buffers (inputs: float32 or a cache part's stored dtype) and copies inputs in; parameters and gradients are
// views of the runtime's memory (parameters live in the program's planned arena: writing them is the update).
#import <Foundation/Foundation.h>

NS_ASSUME_NONNULL_BEGIN

/// A float32 view of a tensor owned by the runtime, valid until the next forwardBackward or until the module dies.
@interface DSTensorView : NSObject
@property(nonatomic, readonly) NSString *name;
@property(nonatomic, readonly) float *data;
@property(nonatomic, readonly) NSInteger count;
@property(nonatomic, readonly) NSArray<NSNumber *> *shape;
@end

/// One program input: little-endian row-major bytes, the manifest's dtype for it ("float32", "float16", "int8",
/// "uint8": contract `cache.part_dtypes`; a cache part is passed as stored) and its shape.
@interface DSTensorInput : NSObject
- (instancetype)initWithBytes:(NSData *)bytes dtype:(NSString *)dtype shape:(NSArray<NSNumber *> *)shape;
@property(nonatomic, readonly) NSData *bytes;
@property(nonatomic, readonly) NSString *dtype;
@property(nonatomic, readonly) NSArray<NSNumber *> *shape;
@end

@interface DSTrainingModule : NSObject
/// Loads a joint forward-backward .pte (bundle programs/executorch/train_step_*.pte) and, when `dataPath` is not nil,
/// the .ptd with its frozen weights (the program entry's `data`). Both are memory-mapped without mlock: clean
/// file-backed pages, not counted in the app's footprint.
- (nullable instancetype)initWithPath:(NSString *)path dataPath:(nullable NSString *)dataPath error:(NSError **)error;
/// Runs the joint graph; returns the loss (output 0). Gradients are then available through namedGradients.
- (nullable NSNumber *)forwardBackward:(NSString *)method
                                inputs:(NSArray<DSTensorInput *> *)inputs
                                 error:(NSError **)error;
- (nullable NSDictionary<NSString *, DSTensorView *> *)namedParameters:(NSString *)method error:(NSError **)error;
- (nullable NSDictionary<NSString *, DSTensorView *> *)namedGradients:(NSString *)method error:(NSError **)error;
@end

NS_ASSUME_NONNULL_END
