//! Quota-mode descriptors refuse a request only when all of them are over
//! (envoyproxy/ratelimit): read before the request counts anywhere, so
//! that a request they refuse counts in none of its descriptors.

use tonic::Status;

use super::{Answer, Plan, RlsService, peek};
use crate::server::rls::rules::Action;

impl RlsService {
    /// Whether the request's quota-mode descriptors, if it has any, are all
    /// over their limits now (those step 1 answered, as answered; the rest
    /// read). Stops at the first with room. When they refuse, what was read
    /// is their answer: the request reads nothing of them again.
    pub(super) async fn quota_refuses(
        &self,
        plans: &[Plan<'_>],
        answers: &mut [Option<Answer>],
    ) -> Result<bool, Status> {
        let mut any = false;
        let mut read = Vec::new();
        for (index, (plan, answer)) in plans.iter().zip(answers.iter()).enumerate() {
            let Plan::Limited(limited) = plan else {
                continue;
            };
            let rule = limited.rule.rule();
            if !rule.quota_mode {
                continue;
            }
            any = true;
            let allowed = match (answer, &rule.action) {
                (Some(answer), _) => answer.allowed(),
                (None, Action::Limit(policy)) => {
                    let decision =
                        peek(&self.app.limiter, &limited.key, policy, limited.hits).await?;
                    let allowed = decision.allowed;
                    read.push((index, decision));
                    allowed
                }
                (None, Action::Refuse) => false,
                (None, Action::Unlimited) => true,
            };
            if allowed {
                return Ok(false);
            }
        }
        for (index, decision) in read {
            answers[index] = Some(Answer::Decided(decision));
        }
        Ok(any)
    }
}
