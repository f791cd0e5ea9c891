//! `power`, `bios` and `bmc`: through accordd (journaled, checked) or
//! straight to the BMCs of the inventory (`--direct`, `power status`).

use super::*;

/// `accordctl power on|off|cycle` without --direct: one request per node
/// to accordd, in order; every node is asked even when one is refused.
pub(super) fn power_through_accordd(
    action: accord_api::control::AdminPowerAction,
    nodes: &[String],
    force: bool,
    dry_run: bool,
    json: bool,
    daemon: &DaemonArgs,
) -> anyhow::Result<()> {
    let nodes = crate::power::expand_names(nodes)?;
    let request = accord_api::control::AdminPowerRequest {
        action,
        force,
        dry_run,
    };
    if force && !dry_run {
        accord_api::esayln!(
            "accordctl: warning: --force: accordd makes none of its checks (work pods, bookings, do-not-disrupt, the plan); the action is journaled and logged as forced"
        );
    }
    let results = daemon.with_timeout(
        accord_api::control::ADMIN_ANSWER_WITHIN + std::time::Duration::from_secs(15),
        |client| async move {
            let mut out = Vec::new();
            for node in nodes {
                let result = match client.power(&node, &request).await {
                    Ok(a) => crate::power::NodeOutcome::Ok(a),
                    // accordd unreachable: no node can be asked.
                    Err(e @ accord_api::ClientError::Unreachable { .. }) => return Err(e),
                    Err(e) => crate::power::NodeOutcome::Error {
                        kind: e
                            .status()
                            .map_or("client", |s| match s.as_u16() {
                                404 => "unknown_node",
                                409 => "refused",
                                503 => "unavailable",
                                _ => "error",
                            })
                            .to_owned(),
                        error: crate::power::refusal_text(&e),
                    },
                };
                out.push(crate::power::NodeResult { node, result });
            }
            Ok(out)
        },
    )?;
    if json {
        accord_api::terminal::print_json(&results)?;
    } else {
        accord_api::say!("{}", crate::power::render_admin(&results));
    }
    if !crate::power::all_ok(&results) {
        let failed = results
            .iter()
            .filter(|r| !matches!(r.result, crate::power::NodeOutcome::Ok(_)))
            .count();
        anyhow::bail!("{failed} of {} node(s) refused or failed", results.len());
    }
    Ok(())
}

pub(super) fn power_cmd(
    action: crate::power::PowerVerb,
    nodes: Vec<String>,
    options: crate::power::PowerOptions,
    json: bool,
    files: InventoryArgs,
) -> anyhow::Result<()> {
    let inventory = files.inventory()?;
    let fleet = files.fleet(false)?;
    let nodes = crate::power::expand_nodes(&inventory, &nodes)?;
    let insecure: Vec<String> = inventory
        .insecure_nodes()
        .into_iter()
        .filter(|n| nodes.contains(n))
        .collect();
    if !insecure.is_empty() {
        accord_api::esayln!(
            "accordctl: warning: BMC certificates not verified for {} (insecure = true)",
            insecure.join(", ")
        );
    }
    let results = runtime()?.block_on(crate::power::power(
        &inventory,
        fleet.as_ref(),
        action,
        &nodes,
        options,
    ))?;
    if json {
        accord_api::terminal::print_json(&results)?;
    } else {
        accord_api::say!("{}", crate::power::render_power(&results, action));
    }
    let failed = results.len()
        - results
            .iter()
            .filter(|r| matches!(r.result, crate::power::NodeOutcome::Ok(_)))
            .count();
    if failed > 0 {
        anyhow::bail!("{failed} of {} node(s) failed", results.len());
    }
    Ok(())
}

pub(super) fn bios_cmd(command: BiosCommand) -> anyhow::Result<()> {
    match command {
        BiosCommand::Apply {
            profile,
            rack,
            dry_run,
            json,
            files,
        } => {
            let inventory = files.inventory()?;
            let fleet = files.fleet(true)?.expect("required");
            let results = runtime()?.block_on(crate::power::bios_apply(
                &inventory, &fleet, &profile, &rack, dry_run,
            ))?;
            if json {
                accord_api::terminal::print_json(&results)?;
            } else {
                accord_api::say!("{}", crate::power::render_bios(&results, &profile));
            }
            if !crate::power::all_ok(&results) {
                anyhow::bail!("BIOS profile {profile} not staged on every node of rack {rack}");
            }
            Ok(())
        }
        BiosCommand::Show { node, json, files } => {
            let inventory = files.inventory()?;
            let target = inventory.target(&node)?;
            let pool = accord_redfish::HttpPool::new(4);
            let bmc = accord_redfish::Bmc::new(target, &pool)?;
            let bios = runtime()?.block_on(async {
                let b = bmc.bios().await;
                bmc.close().await;
                b
            })?;
            if json {
                accord_api::terminal::print_json(&bios)?;
            } else {
                accord_api::sayln!(
                    "{node}: {} ({} attributes); changes go to {}",
                    bios.path,
                    bios.attributes.len(),
                    bios.settings_target.as_deref().unwrap_or(&bios.path)
                );
                for (k, v) in &bios.attributes {
                    accord_api::sayln!("  {k} = {v}");
                }
            }
            Ok(())
        }
    }
}

pub(super) fn bmc_cmd(command: BmcCommand) -> anyhow::Result<()> {
    let BmcCommand::Probe {
        url,
        user,
        password_file,
        ca,
        insecure,
        json,
    } = command;
    let endpoint: reqwest::Url = url.parse().with_context(|| format!("{url}: not a URL"))?;
    if !endpoint.username().is_empty() || endpoint.password().is_some() {
        anyhow::bail!("{url}: give the user with --user and the password with --password-file, not in the URL");
    }
    let credentials = match (user, password_file) {
        (Some(username), Some(file)) => {
            if let Some(p) = accord_api::admin_files::check_secret("--password-file", &file) {
                anyhow::bail!(p);
            }
            Some(accord_redfish::Credentials {
                username,
                password: accord_redfish::Secret::new(read(&file)?.trim_end_matches(['\n', '\r'])),
            })
        }
        (Some(_), None) => anyhow::bail!("--user needs --password-file"),
        _ => None,
    };
    let settings = accord_redfish::BmcSettings {
        retry_attempts: 2,
        request_timeout: std::time::Duration::from_secs(15),
        ..Default::default()
    };
    let target = accord_redfish::BmcTarget {
        name: endpoint.host_str().unwrap_or("bmc").to_owned(),
        endpoint,
        system: None,
        credentials,
        credentials_file: None,
        tls: if insecure {
            accord_redfish::TlsMode::Insecure
        } else {
            accord_redfish::TlsMode::Verify { ca_file: ca }
        },
        settings,
    };
    let pool = accord_redfish::HttpPool::new(4);
    let bmc = accord_redfish::Bmc::new(target, &pool)?;
    let report = runtime()?.block_on(async {
        let r = accord_redfish::probe::probe(&bmc).await;
        bmc.close().await;
        r
    })?;
    if json {
        accord_api::terminal::print_json(&report)?;
    } else {
        accord_api::say!("{}", report.render());
    }
    Ok(())
}
