//! CapacityBuffers: a buffer Accord serves becomes a workload of
//! placeholder pods of its template (no gang: each stands alone), and how
//! it resolves (template, replicas, or why not) is its status.
//!
//! Replicas as the upstream buffer controller computes them (Karpenter
//! v1.14 `pkg/controllers/capacitybuffer`, following cluster-autoscaler):
//! the larger of `replicas` and `percentage` of the scalable's replicas
//! (rounded up, at least 1), capped by `limits` (for each resource both
//! name, floor(limit / one pod's request); the smallest); with neither
//! `replicas` nor `percentage`, as many as the limits hold.

use super::*;
use crate::manifests::CapacityBuffer;

/// The name of a buffer's placeholder workload: upper case cannot be in a
/// Kubernetes object name, so no real workload has it.
pub fn buffer_workload_name(buffer: &str) -> String {
    format!("CapacityBuffer.{buffer}")
}

/// What a buffer resolves to.
#[derive(Debug)]
pub struct Resolution<'a> {
    /// The PodTemplate (name, generation) or the scalable it came from.
    pub pod_template: Option<(String, Option<i64>)>,
    pub template: &'a core::PodTemplateSpec,
    pub replicas: u32,
}

/// Why a buffer does not resolve (`ReadyForProvisioning=False`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unresolved {
    /// `PodTemplateNotFound`, `ScalableRefNotFound` or `ResolutionFailed`.
    pub reason: &'static str,
    pub message: String,
}

/// The objects a buffer may name, by (namespace, name).
#[derive(Debug)]
pub struct BufferIndex<'a> {
    pub pod_templates: BTreeMap<(String, String), &'a core::PodTemplate>,
    pub deployments: BTreeMap<(String, String), &'a k8s_openapi::api::apps::v1::Deployment>,
}

impl<'a> BufferIndex<'a> {
    pub fn of(m: &'a Manifests) -> BufferIndex<'a> {
        let mut i = BufferIndex {
            pod_templates: BTreeMap::new(),
            deployments: BTreeMap::new(),
        };
        for o in &m.objects {
            match o {
                Object::PodTemplate(t) => {
                    i.pod_templates
                        .insert((ns_of(&t.metadata), name_of(&t.metadata)), t);
                }
                Object::Deployment(d) => {
                    i.deployments
                        .insert((ns_of(&d.metadata), name_of(&d.metadata)), d);
                }
                _ => {}
            }
        }
        i
    }
}

fn failed(reason: &'static str, message: String) -> Unresolved {
    Unresolved { reason, message }
}

/// Resolves `cb`'s pod template and replicas.
pub fn resolve<'a>(
    cb: &CapacityBuffer,
    index: &BufferIndex<'a>,
    options: &Options,
) -> Result<Resolution<'a>, Unresolved> {
    let ns = ns_of(&cb.metadata);
    let spec = &cb.spec;
    let (pod_template, template, scalable_replicas) =
        match (&spec.pod_template_ref, &spec.scalable_ref) {
            (Some(_), Some(_)) => {
                return Err(failed(
                    "ResolutionFailed",
                    "both podTemplateRef and scalableRef are set (exactly one may be)".to_owned(),
                ))
            }
            (None, None) => {
                return Err(failed(
                    "ResolutionFailed",
                    "Neither podTemplateRef nor scalableRef is set".to_owned(),
                ))
            }
            (Some(r), None) => {
                let Some(t) = index.pod_templates.get(&(ns.clone(), r.name.clone())) else {
                    return Err(failed(
                        "PodTemplateNotFound",
                        format!("PodTemplate {ns}/{} not found", r.name),
                    ));
                };
                let Some(tpl) = t.template.as_ref() else {
                    return Err(failed(
                        "ResolutionFailed",
                        format!("PodTemplate {ns}/{} has no template", r.name),
                    ));
                };
                (Some((r.name.clone(), t.metadata.generation)), tpl, None)
            }
            (None, Some(s)) => {
                if !(s.kind == "Deployment" && matches!(s.api_group.as_str(), "apps" | "")) {
                    return Err(failed(
                        "ResolutionFailed",
                        format!(
                            "scalableRef {}/{} {}: Accord reads Deployments (apps) only; name a \
                         PodTemplate in podTemplateRef instead",
                            s.api_group, s.kind, s.name
                        ),
                    ));
                }
                let Some(d) = index.deployments.get(&(ns.clone(), s.name.clone())) else {
                    return Err(failed(
                        "ScalableRefNotFound",
                        format!("Deployment {ns}/{} not found", s.name),
                    ));
                };
                (
                    None,
                    &d.spec.template,
                    Some(i64::from(d.spec.replicas.unwrap_or(1))),
                )
            }
        };
    let source = ObjectRef::new(
        cb.api_version(),
        "CapacityBuffer",
        &ns,
        &name_of(&cb.metadata),
    );
    let mut wanted: Option<i64> = None;
    if let Some(r) = spec.replicas {
        if r < 0 {
            return Err(failed(
                "ResolutionFailed",
                format!("replicas {r} is negative"),
            ));
        }
        wanted = Some(r);
    }
    if let (Some(p), Some(of)) = (spec.percentage, scalable_replicas) {
        if p < 0 {
            return Err(failed(
                "ResolutionFailed",
                format!("percentage {p} is negative"),
            ));
        }
        // Both are bounded (an i32 and a checked percentage): no overflow
        // in i128.
        let n = (i128::from(of) * i128::from(p) + 99) / 100;
        let n = if p > 0 && of > 0 { n.max(1) } else { n };
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        wanted = Some(wanted.map_or(n, |w| w.max(n)));
    }
    if let Some(limits) = &spec.limits {
        let pod = template
            .spec
            .as_ref()
            .ok_or_else(|| failed("ResolutionFailed", "the pod template has no spec".into()))?;
        let fit = limit_replicas(limits, pod).map_err(|e| failed("ResolutionFailed", e))?;
        if let Some(fit) = fit {
            wanted = Some(wanted.map_or(fit, |w| w.min(fit)));
        }
    }
    let wanted = wanted.unwrap_or(0);
    let replicas = within_limit(&source, "replicas", wanted, options)
        .map_err(|e| failed("ResolutionFailed", e))?;
    Ok(Resolution {
        pod_template,
        template,
        replicas,
    })
}

/// How many pods of `pod` the limits hold: for each resource both name,
/// floor(limit / request), the smallest; `None` when none is shared.
fn limit_replicas(
    limits: &BTreeMap<String, serde_json::Value>,
    pod: &core::PodSpec,
) -> Result<Option<i64>, String> {
    let requests = pod::effective_requests(pod)?;
    let mut fit: Option<i64> = None;
    for (resource, limit) in limits {
        let Some(request) = requests.get(resource) else {
            continue;
        };
        let request = quantity::parse(request).map_err(|e| format!("request {resource}: {e}"))?;
        if request <= 0 {
            continue;
        }
        let limit = match limit {
            serde_json::Value::String(s) => quantity::parse(s),
            serde_json::Value::Number(n) => quantity::parse(&n.to_string()),
            other => return Err(format!("limits {resource}: {other} is not a quantity")),
        }
        .map_err(|e| format!("limits {resource}: {e}"))?;
        let n = limit.max(0) / request;
        fit = Some(fit.map_or(n, |f| f.min(n)));
    }
    Ok(fit)
}

/// `cb` as demand: a workload of its placeholder pods (none when it does
/// not resolve or wants none; its status says why).
pub(super) fn capacity_buffer<'a>(
    cb: &'a CapacityBuffer,
    options: &Options,
    index: &BufferIndex<'a>,
    groups: &mut BTreeMap<GroupKey, Group<'a>>,
) {
    let Ok(r) = resolve(cb, index, options) else {
        return;
    };
    let Some(spec) = r.template.spec.as_ref() else {
        return;
    };
    if r.replicas == 0 {
        return;
    }
    let (ns, name) = (ns_of(&cb.metadata), name_of(&cb.metadata));
    let source = ObjectRef::new(cb.api_version(), "CapacityBuffer", &ns, &name);
    let g = groups
        .entry(GroupKey::Owner(
            "CapacityBuffer",
            ns.clone(),
            buffer_workload_name(&name),
        ))
        .or_default();
    g.sources.push(source.clone());
    g.units.push(Unit {
        namespace: ns,
        set_name: "placeholder".to_owned(),
        meta: r.template.metadata.as_ref(),
        spec,
        count: r.replicas,
        created: created(&cb.metadata),
        source,
    });
}
