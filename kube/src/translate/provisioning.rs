//! ProvisioningRequests: a class Accord honours becomes a gang of its pod sets.

use super::*;

pub(super) fn provisioning_request<'a>(
    pr: &'a crate::manifests::ProvisioningRequest,
    options: &Options,
    index: &Index<'a>,
    groups: &mut BTreeMap<GroupKey, Group<'a>>,
) {
    // Provisioned (its capacity is booked), failed or expired: the
    // request is no longer demand.
    if pr.settled() {
        return;
    }
    let (ns, name) = (ns_of(&pr.metadata), name_of(&pr.metadata));
    let source = ObjectRef::new(pr.api_version(), "ProvisioningRequest", &ns, &name);
    let g = groups
        .entry(GroupKey::Owner(
            "ProvisioningRequest",
            ns.clone(),
            name.clone(),
        ))
        .or_default();
    g.sources.push(source.clone());
    let class = pr.spec.provisioning_class_name.as_str();
    if !matches!(class, CHECK_CAPACITY | BEST_EFFORT_ATOMIC | ACCORD_STRICT) {
        g.errors.push(format!(
            "ProvisioningRequest class {class} is not one Accord provisions ({CHECK_CAPACITY}, {BEST_EFFORT_ATOMIC}, {ACCORD_STRICT})"
        ));
    }
    let mut total = 0u64;
    for ps in &pr.spec.pod_sets {
        // Checked first: nothing below is sized by it.
        let what = format!("podSet {} count", ps.pod_template_ref.name);
        let count = match within_limit(&source, &what, i64::from(ps.count), options) {
            Ok(c) => c,
            Err(e) => {
                g.errors.push(e);
                continue;
            }
        };
        let Some(t) = index
            .pod_templates
            .get(&(ns.clone(), ps.pod_template_ref.name.clone()))
        else {
            g.errors.push(format!(
                "PodTemplate {ns}/{} not found",
                ps.pod_template_ref.name
            ));
            continue;
        };
        let Some(tpl) = t.template.as_ref() else {
            g.errors.push(format!(
                "PodTemplate {ns}/{} has no template",
                ps.pod_template_ref.name
            ));
            continue;
        };
        let Some(spec) = tpl.spec.as_ref() else {
            continue;
        };
        total += u64::from(count);
        g.units.push(Unit {
            namespace: ns.clone(),
            set_name: ps.pod_template_ref.name.clone(),
            meta: tpl.metadata.as_ref(),
            spec,
            count,
            created: created(&pr.metadata),
            source: source.clone(),
        });
    }
    // Every class Accord serves is all-or-nothing for its pod sets.
    g.owner_min = Some(total);
}
