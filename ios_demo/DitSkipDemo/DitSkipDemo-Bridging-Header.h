// Exposes the Objective-C++ bridge over ExecuTorch's C++ TrainingModule to Swift.
#import "ETTrainingBridge.h"
