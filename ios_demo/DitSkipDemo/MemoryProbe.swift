import Darwin
import Foundation
import os

/// What the iOS handset measurement reads: os_proc_available_memory() (bytes the app may still allocate before
/// jetsam, with the increased-memory-limit entitlement counted) and the physical footprint (task_vm_info), which is
/// what jetsam compares with the limit.
enum MemoryProbe {
    struct Reading: Codable {
        let availableBytes: UInt64
        let footprintBytes: UInt64
    }

    static func read() -> Reading {
        var info = task_vm_info_data_t()
        var count = mach_msg_type_number_t(MemoryLayout<task_vm_info_data_t>.size / MemoryLayout<natural_t>.size)
        let kr = withUnsafeMutablePointer(to: &info) {
            $0.withMemoryRebound(to: integer_t.self, capacity: Int(count)) {
                task_info(mach_task_self_, task_flavor_t(TASK_VM_INFO), $0, &count)
            }
        }
        let footprint = kr == KERN_SUCCESS ? UInt64(info.phys_footprint) : 0
        return Reading(availableBytes: UInt64(os_proc_available_memory()), footprintBytes: footprint)
    }
}
