// swift-tools-version:5.9
// The iOS binding of the native runtime core: a C module over include/ditskip/ditskip.h (CDitskip) and a Swift
// module (Ditskip) whose actor owns the handles. Not built on the machines this was written on (no Swift toolchain,
// no Xcode): see README.md for the Xcode / SwiftPM step and the libditskip this package links.
import PackageDescription

let package = Package(
    name: "Ditskip",
    platforms: [.iOS(.v17), .macOS(.v14)],
    products: [.library(name: "Ditskip", targets: ["Ditskip"])],
    targets: [
        // module.modulemap: the core's one header, and `link "ditskip"` (libditskip built by CMake, README.md)
        .systemLibrary(name: "CDitskip", path: "Sources/CDitskip"),
        .target(name: "Ditskip", dependencies: ["CDitskip"], path: "Sources/Ditskip"),
    ]
)
