import Foundation

/// A tensor read from a safetensors file: dtype ("F32", ...), shape and little-endian raw bytes.
struct RawTensor {
    let dtype: String
    let shape: [Int]
    let bytes: Data
    var count: Int { shape.reduce(1, *) }

    /// Row i of the first dimension, shape [1, ...] (its bytes alone).
    func row(_ i: Int) throws -> RawTensor {
        guard let n = shape.first, (0..<n).contains(i) else { throw TrainError.bundle("row \(i) of a tensor of shape \(shape)") }
        let rowBytes = bytes.count / n
        let start = bytes.startIndex + i * rowBytes
        return RawTensor(dtype: dtype, shape: [1] + shape.dropFirst(), bytes: bytes.subdata(in: start..<(start + rowBytes)))
    }

    func floats() throws -> [Float] {
        guard dtype == "F32" else { throw TrainError.bundle("tensor is \(dtype), expected F32") }
        return bytes.withUnsafeBytes { raw in
            (0..<count).map { Float(bitPattern: UInt32(littleEndian: raw.loadUnaligned(fromByteOffset: 4 * $0, as: UInt32.self))) }
        }
    }
}

/// safetensors: u64 little-endian header length, JSON header, data (offsets relative to the end of the header).
enum Safetensors {
    static func read(_ url: URL) throws -> (tensors: [String: RawTensor], metadata: [String: String]) {
        let data = try Data(contentsOf: url, options: .alwaysMapped)
        let headerLen = Int(data.withUnsafeBytes { UInt64(littleEndian: $0.loadUnaligned(as: UInt64.self)) })
        guard let header = try JSONSerialization.jsonObject(with: data.subdata(in: 8..<(8 + headerLen))) as? [String: Any]
        else { throw TrainError.bundle("\(url.path): bad safetensors header") }
        var out: [String: RawTensor] = [:]
        var meta: [String: String] = [:]
        for (key, value) in header {
            if key == "__metadata__" { meta = value as? [String: String] ?? [:]; continue }
            guard let info = value as? [String: Any], let dtype = info["dtype"] as? String,
                  let shape = info["shape"] as? [Int], let offs = info["data_offsets"] as? [Int]
            else { throw TrainError.bundle("\(url.path): bad entry \(key)") }
            out[key] = RawTensor(dtype: dtype, shape: shape, bytes: data.subdata(in: (8 + headerLen + offs[0])..<(8 + headerLen + offs[1])))
        }
        return (out, meta)
    }

    /// float32 tensors, keys sorted as the Python writer does; atomic (Data.write .atomic: temporary file + rename).
    static func writeF32(_ url: URL, _ tensors: [String: (shape: [Int], values: [Float])], metadata: [String: String]) throws {
        var header: [String: Any] = [:]
        if !metadata.isEmpty { header["__metadata__"] = metadata }
        var offset = 0
        let keys = tensors.keys.sorted()
        for k in keys {
            let n = tensors[k]!.values.count * 4
            header[k] = ["dtype": "F32", "shape": tensors[k]!.shape, "data_offsets": [offset, offset + n]]
            offset += n
        }
        var headerData = try JSONSerialization.data(withJSONObject: header, options: [.sortedKeys])
        headerData.append(contentsOf: [UInt8](repeating: 0x20, count: (8 - headerData.count % 8) % 8))
        var out = Data()
        var len = UInt64(headerData.count).littleEndian
        out.append(Data(bytes: &len, count: 8))
        out.append(headerData)
        for k in keys { tensors[k]!.values.withUnsafeBufferPointer { out.append(Data(buffer: $0)) } }
        try out.write(to: url, options: .atomic)      // written to a temporary file, then renamed into place
    }
}

enum TrainError: Error, CustomStringConvertible {
    case bundle(String)
    case runtime(String)
    var description: String {
        switch self { case .bundle(let s): return "bundle: \(s)"; case .runtime(let s): return "runtime: \(s)" }
    }
}
