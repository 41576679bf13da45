// Exposes the Objective-C++ bridges over ExecuTorch's C++ TrainingModule and Module to Swift.
#import "ETTrainingBridge.h"
#import "ETInferenceBridge.h"
