"""`assay validate`: the one offline check of task names, task YAML and Evaluation manifests.

`command` is the subcommand (flags, output, exit code); `manifests` checks Evaluation
manifest files with the parser and checks the operator and the runner pod use. The checks
themselves live where the programs that stop at the first error find them: `assay.spec`
(the spec), `assay.runner.checks.offline_check` (model, model_args, tasks and task YAML) and
`assay.operator.admission.validation` (what a spec must grant its model and tasks).
"""
