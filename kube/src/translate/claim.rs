//! DRA claims and device classes: requests, CEL selectors, constraints.

use super::*;

pub(super) type CelCache =
    std::cell::RefCell<std::collections::HashMap<String, Result<(), String>>>;

pub(super) fn selectors(
    s: Option<&Vec<dra::DeviceSelector>>,
    cache: &CelCache,
) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for sel in s.into_iter().flatten() {
        let Some(cel) = &sel.cel else {
            return Err("a selector without `cel` (the expression belongs under selectors[].cel.expression)".to_owned());
        };
        let known = cache.borrow().get(&cel.expression).cloned();
        let checked = match known {
            Some(c) => c,
            None => {
                let c = accord::fit::check_selector(&cel.expression);
                cache.borrow_mut().insert(cel.expression.clone(), c.clone());
                c
            }
        };
        checked.map_err(|e| format!("CEL {:?}: {e}", cel.expression))?;
        out.push(cel.expression.clone());
    }
    Ok(out)
}

#[allow(clippy::too_many_arguments)]
pub(super) fn exact(
    name: Option<String>,
    class: &str,
    sel: Option<&Vec<dra::DeviceSelector>>,
    mode: Option<&str>,
    count: Option<i64>,
    capacity: Option<&dra::CapacityRequirements>,
    admin_access: Option<bool>,
    tolerations: Option<&Vec<dra::DeviceToleration>>,
    cache: &CelCache,
) -> Result<ExactRequest, String> {
    if admin_access == Some(true) {
        return Err("adminAccess is not supported".to_owned());
    }
    let tolerations = tolerations
        .into_iter()
        .flatten()
        .map(toleration)
        .collect::<Result<Vec<_>, _>>()?;
    let allocation_mode = match mode {
        None | Some("ExactCount") => AllocationMode::ExactCount,
        Some("All") => AllocationMode::All,
        Some(other) => return Err(format!("allocationMode {other:?}")),
    };
    let count = match count {
        None => 1,
        Some(c) if c < 0 => return Err(format!("negative count {c}")),
        Some(c) if c == 0 && allocation_mode == AllocationMode::ExactCount => {
            return Err("count 0".to_owned())
        }
        Some(c) => u32::try_from(c).map_err(|_| format!("count {c} too large"))?,
    };
    Ok(ExactRequest {
        name,
        device_class: class.to_owned(),
        selectors: selectors(sel, cache)?,
        count,
        allocation_mode,
        capacity: capacity
            .and_then(|c| c.requests.as_ref())
            .map(|r| r.iter().map(|(k, q)| (k.clone(), q.0.clone())).collect())
            .unwrap_or_default(),
        tolerations,
    })
}

/// A request's device toleration, checked as the API server validates it
/// (`Equal` or `Exists`; `Exists` takes no value; a known effect).
fn toleration(t: &dra::DeviceToleration) -> Result<accord::device::DeviceToleration, String> {
    let operator = t.operator.clone().unwrap_or_default();
    let value = t.value.clone().unwrap_or_default();
    match operator.as_str() {
        "" | "Equal" => {}
        "Exists" if value.is_empty() => {}
        "Exists" => {
            return Err(format!(
                "toleration of {:?}: operator Exists takes no value",
                t.key
            ))
        }
        other => return Err(format!("toleration operator {other:?} (Equal or Exists)")),
    }
    let effect = t.effect.clone().unwrap_or_default();
    if !matches!(effect.as_str(), "" | "NoSchedule" | "NoExecute" | "None") {
        return Err(format!(
            "toleration effect {effect:?} (NoSchedule, NoExecute or None)"
        ));
    }
    Ok(accord::device::DeviceToleration {
        key: t.key.clone().unwrap_or_default(),
        operator,
        value,
        effect,
    })
}

/// A ResourceClaimSpec's `devices` as [`accord::demand::ClaimLists`]:
/// Kubernetes' bounds on a claim checked by the core's one check.
struct Lists<'a>(&'a dra::DeviceClaim);

impl Lists<'_> {
    fn request(&self, i: usize) -> &dra::DeviceRequest {
        &self.0.requests.as_deref().unwrap_or_default()[i]
    }
}

/// An optional list's length.
fn count<T>(list: &Option<Vec<T>>) -> usize {
    list.as_ref().map_or(0, Vec::len)
}

impl accord::demand::ClaimLists for Lists<'_> {
    fn requests(&self) -> usize {
        count(&self.0.requests)
    }
    fn request_name(&self, i: usize) -> &str {
        &self.request(i).name
    }
    fn first_available(&self, i: usize) -> usize {
        count(&self.request(i).first_available)
    }
    fn device_lists(&self, i: usize, sub: Option<usize>) -> (usize, usize) {
        let r = self.request(i);
        match sub {
            None => r
                .exactly
                .as_ref()
                .map_or((0, 0), |e| (count(&e.selectors), count(&e.tolerations))),
            Some(j) => r
                .first_available
                .as_ref()
                .and_then(|a| a.get(j))
                .map_or((0, 0), |s| (count(&s.selectors), count(&s.tolerations))),
        }
    }
    fn constraints(&self) -> usize {
        count(&self.0.constraints)
    }
    fn constraint_requests(&self, i: usize) -> usize {
        count(&self.0.constraints.as_deref().unwrap_or_default()[i].requests)
    }
    fn config(&self) -> usize {
        count(&self.0.config)
    }
}

/// At most a few of `problems`, for one "cannot plan" reason.
pub(super) fn first_few(problems: &[String]) -> String {
    const SHOWN: usize = 3;
    let mut text = problems[..problems.len().min(SHOWN)].join("; ");
    if problems.len() > SHOWN {
        text.push_str(&format!(" (and {} more)", problems.len() - SHOWN));
    }
    text
}

pub(super) fn claim(
    name: &str,
    spec: &dra::ResourceClaimSpec,
    cache: &CelCache,
) -> Result<Claim, String> {
    let Some(devices) = &spec.devices else {
        return Ok(Claim {
            name: name.to_owned(),
            requests: Vec::new(),
            constraints: Vec::new(),
        });
    };
    // Kubernetes' bounds first: nothing is built (no selector checked) per
    // request of a claim past them.
    let problems = accord::demand::check_claim_bounds(&Lists(devices));
    if !problems.is_empty() {
        return Err(first_few(&problems));
    }
    let mut requests = Vec::new();
    for r in devices.requests.iter().flatten() {
        let req = match (&r.exactly, &r.first_available) {
            (Some(e), None) => DeviceRequest {
                name: r.name.clone(),
                exactly: Some(
                    exact(
                        None,
                        &e.device_class_name,
                        e.selectors.as_ref(),
                        e.allocation_mode.as_deref(),
                        e.count,
                        e.capacity.as_ref(),
                        e.admin_access,
                        e.tolerations.as_ref(),
                        cache,
                    )
                    .map_err(|e| format!("request {}: {e}", r.name))?,
                ),
                first_available: Vec::new(),
            },
            (None, Some(alts)) => DeviceRequest {
                name: r.name.clone(),
                exactly: None,
                first_available: alts
                    .iter()
                    .map(|s| {
                        exact(
                            Some(s.name.clone()),
                            &s.device_class_name,
                            s.selectors.as_ref(),
                            s.allocation_mode.as_deref(),
                            s.count,
                            s.capacity.as_ref(),
                            None,
                            s.tolerations.as_ref(),
                            cache,
                        )
                        .map_err(|e| format!("request {}/{}: {e}", r.name, s.name))
                    })
                    .collect::<Result<_, _>>()?,
            },
            _ => {
                return Err(format!(
                    "request {}: set exactly one of `exactly` and `firstAvailable`",
                    r.name
                ))
            }
        };
        requests.push(req);
    }
    let mut constraints = Vec::new();
    for c in devices.constraints.iter().flatten() {
        if c.distinct_attribute.is_some() {
            return Err("distinctAttribute constraints are not supported".to_owned());
        }
        let Some(attr) = &c.match_attribute else {
            continue;
        };
        constraints.push(Constraint {
            // An empty list means every request.
            requests: c.requests.clone().unwrap_or_default(),
            match_attribute: attr.clone(),
        });
    }
    Ok(Claim {
        name: name.to_owned(),
        requests,
        constraints,
    })
}

pub(super) fn device_class(c: &dra::DeviceClass, cannot: &mut Vec<CannotPlan>) -> DeviceClass {
    use accord::demand::MAX_REQUEST_SELECTORS;
    let name = name_of(&c.metadata);
    let listed = c.spec.as_ref().and_then(|s| s.selectors.as_ref());
    let n = listed.map_or(0, Vec::len);
    // `DeviceSelectorsMaxSize` bounds a DeviceClass's selectors too.
    let checked = if n > MAX_REQUEST_SELECTORS {
        Err(format!("{n} selectors (at most {MAX_REQUEST_SELECTORS})"))
    } else {
        selectors(listed, &CelCache::default())
    };
    let sel = match checked {
        Ok(s) => s,
        Err(e) => {
            cannot.push(CannotPlan {
                workload: format!("DeviceClass {name}"),
                sources: vec![ObjectRef::new(
                    "resource.k8s.io/v1",
                    "DeviceClass",
                    "",
                    &name,
                )],
                reason: e,
            });
            Vec::new()
        }
    };
    DeviceClass {
        name,
        selectors: sel,
    }
}
