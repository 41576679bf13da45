import SwiftUI

@main
struct DitSkipDemoApp: App {
    var body: some Scene { WindowGroup { ContentView() } }
}
