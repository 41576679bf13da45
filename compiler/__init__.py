"""The compiler's top layer: the compile orchestration, its subcommands and the `ditskip-edge` console script.

    compile.py        photos + prompt + model -> bundle, a chain of stages with plain artifacts
    stage_worker.py   the program stages that need no subject, exported by a second process (`--jobs 2`)
    commands/         one module per subcommand (compile, train, select, cache-report, estimate, program-cache)
    cli.py            the console script: parses, runs one command, prints its result
    logs.py           what the user sees on stderr: our logs, third parties' warnings only with -v

It imports the layers below it (tests/test_layers.py checks the direction): the exporters (`export/`), the
model views, quantization, LoRA, skip plan, cache, selection and memory estimate (`ditskip_edge/`) and the
device runtime (`ditskip_edge/runtime/`); nothing below imports it.
"""
