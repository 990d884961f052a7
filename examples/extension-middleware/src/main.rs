//! Runs the offline demo and prints the chain and what the extension middlewares saw.

#[allow(clippy::print_stdout)]
#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let report = antler_example_extension_middleware::demo().await?;
    println!("lead chain:");
    for (i, line) in report.chain.iter().enumerate() {
        println!("{:>3}. {line}", i + 1);
    }
    println!("tool audit: {:?}", report.audit);
    println!("logical model calls: {}", report.logical_model_calls);
    println!("answer: {}", report.answer);
    Ok(())
}
