//! How a CEL selector is parsed and how what goes wrong is told: the
//! parse environment (CEL's standard macros, optional syntax, `cel.bind`)
//! and error and panic texts cut to a bounded length.

use std::any::Any;

use cel::common::ast::{Expr, LiteralValue};
use cel::ParseErrors;

/// Characters of a parser message kept (it may quote a long token).
const MESSAGE_CHARS: usize = 200;

/// What `matches` calls are parsed into: Accord's `matches`, on a bounded
/// regex compiler (`cel_regex`). The crate's own overload cannot be
/// replaced in its environment, so the call is renamed as it is parsed;
/// `#` keeps the name out of any selector's reach.
pub(crate) const BOUNDED_MATCHES: &str = "matches#bounded";

/// The parse environment: CEL's standard macros and optional syntax,
/// `cel.bind` (cel-go's `ext.Bindings`, which the scheduler's environment
/// has: k8s.io/apiserver/pkg/cel/environment/base.go), and `matches` in
/// both forms renamed to [`BOUNDED_MATCHES`]; the calls in a namespace
/// of `cel_library` (`sets.contains(a, b)`) renamed to its functions.
pub(super) fn parser_env() -> cel::Env {
    let mut env = cel::Env::stdlib();
    env.add_macro(cel::parser::Macro::receiver("bind", 3, bind_macro))
        .expect("bind is not a standard macro");
    env.add_macro(cel::parser::Macro::receiver("matches", 1, matches_macro))
        .expect("matches is not a standard macro");
    env.add_macro(cel::parser::Macro::global("matches", 2, matches_macro))
        .expect("matches is not a standard macro");
    for &(namespace, function, args, name) in super::cel_library::NAMESPACED {
        let rename = move |helper: &mut cel::parser::MacroExprHelper<'_>,
                           target: &mut Option<cel::IdedExpr>,
                           rest: &mut Vec<cel::IdedExpr>| {
            namespaced_macro(namespace, name, helper, target, rest)
        };
        env.add_macro(cel::parser::Macro::receiver(function, args, rename))
            .expect("no standard macro is named so");
    }
    env
}

/// `namespace.f(args)` as the global `name(args)`; `f` called on anything
/// but the bare identifier `namespace` is left alone.
fn namespaced_macro(
    namespace: &str,
    name: &str,
    helper: &mut cel::parser::MacroExprHelper<'_>,
    target: &mut Option<cel::IdedExpr>,
    args: &mut Vec<cel::IdedExpr>,
) -> Result<Option<cel::IdedExpr>, cel::ParseError> {
    if !matches!(target.as_ref().map(|t| &t.expr), Some(Expr::Ident(n)) if n == namespace) {
        return Ok(None);
    }
    Ok(Some(helper.next_expr(Expr::Call(
        cel::common::ast::CallExpr {
            func_name: name.to_owned(),
            target: None,
            args: std::mem::take(args),
        },
    ))))
}

/// `s.matches(re)` and `matches(s, re)` as `matches#bounded(s, re)`.
fn matches_macro(
    helper: &mut cel::parser::MacroExprHelper<'_>,
    target: &mut Option<cel::IdedExpr>,
    args: &mut Vec<cel::IdedExpr>,
) -> Result<Option<cel::IdedExpr>, cel::ParseError> {
    let mut all: Vec<cel::IdedExpr> = target.take().into_iter().collect();
    all.append(args);
    Ok(Some(helper.next_expr(Expr::Call(
        cel::common::ast::CallExpr {
            func_name: BOUNDED_MATCHES.to_owned(),
            target: None,
            args: all,
        },
    ))))
}

/// Expands `cel.bind(name, init, result)` as cel-go does: a comprehension
/// over an empty list whose accumulator, `name`, is `init` while `result`
/// is evaluated. Any other `x.bind(...)` is left alone.
fn bind_macro(
    helper: &mut cel::parser::MacroExprHelper<'_>,
    target: &mut Option<cel::IdedExpr>,
    args: &mut Vec<cel::IdedExpr>,
) -> Result<Option<cel::IdedExpr>, cel::ParseError> {
    if !matches!(target.as_ref().map(|t| &t.expr), Some(Expr::Ident(n)) if n == "cel") {
        return Ok(None);
    }
    let name = match args.first().map(|a| &a.expr) {
        Some(Expr::Ident(n)) => n.clone(),
        _ => {
            let id = args.first().map_or(0, |a| a.id);
            return Err(helper.new_error(id, "cel.bind's first argument must be a name"));
        }
    };
    let result = args.pop().expect("three arguments");
    let init = args.pop().expect("three arguments");
    let bind = cel::common::ast::ComprehensionExpr {
        iter_range: helper.next_expr(Expr::List(cel::common::ast::ListExpr::new(Vec::new()))),
        iter_var: "#unused".to_owned(),
        iter_var2: None,
        accu_var: name.clone(),
        accu_init: init,
        loop_cond: helper.next_expr(Expr::Literal(LiteralValue::Boolean(false.into()))),
        loop_step: helper.next_expr(Expr::Ident(name)),
        result,
    };
    Ok(Some(helper.next_expr(Expr::Comprehension(Box::new(bind)))))
}

/// The first (leftmost) parse error as `ERROR: <input>:LINE:COLUMN:
/// message`, built from its parts: the crate's `Display` panics past
/// column 65,535.
pub(super) fn first_error(errors: &ParseErrors) -> String {
    match errors.errors.first() {
        Some(e) => format!(
            "ERROR: <input>:{}:{}: {}",
            e.pos.0,
            e.pos.1,
            clip(
                e.msg.lines().next().unwrap_or("syntax error"),
                MESSAGE_CHARS
            )
        ),
        None => "syntax error".to_owned(),
    }
}

/// `text` cut to `max` characters, an ellipsis saying so.
pub(crate) fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

/// A caught panic's message, when it has one.
pub(crate) fn panic_message(panic: &(dyn Any + Send)) -> String {
    let text = panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("panic");
    clip(text, MESSAGE_CHARS)
}

#[cfg(test)]
mod tests {
    use super::clip;

    #[test]
    fn clip_keeps_char_boundaries() {
        assert_eq!(clip("abc", 5), "abc");
        assert_eq!(clip("ééé", 2), "éé…");
    }
}
