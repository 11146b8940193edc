-- Argo CD health of an assay.dev Evaluation (resource.customizations.health.assay.dev_Evaluation).
-- An Evaluation is a run, not a service: Healthy once its scores are in, Degraded once it
-- failed for good (the operator never retries a failed run) or regressed against its
-- spec.baseline (condition Regressed True: a suite gates a promotion), Suspended while spec.suspend
-- holds it, Progressing otherwise, including while the operator has not yet seen the
-- latest spec (a stale status would report the previous run's outcome).
local hs = {status = "Progressing", message = "Waiting for the Assay operator to accept the Evaluation."}
local status = obj.status
if status == nil then
  return hs
end
local generation = obj.metadata.generation
if generation ~= nil and (status.observedGeneration == nil or status.observedGeneration < generation) then
  hs.message = "Waiting for the Assay operator to observe generation " .. generation .. "."
  return hs
end
local conditions = {}
if status.conditions ~= nil then
  for _, condition in ipairs(status.conditions) do
    conditions[condition.type] = condition
  end
end
local function holds(type)
  local condition = conditions[type]
  return condition ~= nil and condition.status == "True"
end
local function note(fallback)
  if status.message ~= nil and status.message ~= "" then
    return status.message
  end
  return fallback
end
if holds("Failed") or holds("Stalled") or status.phase == "Failed" then
  hs.status = "Degraded"
  hs.message = note("The evaluation failed.")
  return hs
end
if holds("Regressed") then
  hs.status = "Degraded"
  hs.message = conditions["Regressed"].message or "A metric regressed against the baseline."
  return hs
end
if holds("Succeeded") or holds("Ready") then
  hs.status = "Healthy"
  hs.message = note("The evaluation finished.")
  return hs
end
if (obj.spec ~= nil and obj.spec.suspend == true) or status.reason == "Suspended" then
  hs.status = "Suspended"
  hs.message = note("The evaluation is suspended.")
  return hs
end
hs.message = note("The evaluation is " .. string.lower(status.phase or "pending") .. ".")
if status.progress ~= nil and status.progress.summary ~= nil then
  hs.message = hs.message .. " Progress: " .. status.progress.summary .. "."
end
return hs
