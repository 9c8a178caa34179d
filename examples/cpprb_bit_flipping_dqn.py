"""cpprb's HER example in PyTorch: double DQN with (optionally prioritized) hindsight replay on bit flipping.

The loop of cpprb's documentation (https://ymd_h.gitlab.io/cpprb/features/her/), with the same
hyperparameters, on herl's cpprb-compatible buffer and herl's BitFlippingEnv (gymnasium API,
a new random goal every episode). Only the import of the buffer changes for a cpprb user:

    from herl.compat.cpprb import HindsightReplayBuffer   # was: from cpprb import HindsightReplayBuffer

    python examples/cpprb_bit_flipping_dqn.py                   # prioritized, 15k steps (about a minute)
    python examples/cpprb_bit_flipping_dqn.py --no-prioritized
    python examples/cpprb_bit_flipping_dqn.py --steps 2000      # shorter

Every ``eval_freq`` steps the greedy policy plays 20 episodes; the script prints the success rate
as it goes and, at the end, the mean of the last 10 evaluations.
"""

from __future__ import annotations

import argparse
import copy

import numpy as np
import torch
from torch import nn

from herl.compat.cpprb import HindsightReplayBuffer
from herl.envs import BitFlippingEnv

# cpprb's hyperparameters
GAMMA = 0.99
BATCH_SIZE = 64
N_ITERATION = 15_000
N_WARMUP = 100
TARGET_UPDATE_FREQ = 1000
EVAL_FREQ = 100
EGREEDY = 0.1
MAX_EPISODE_LEN = 100
NBIT = 10
BUFFER_SIZE = 1_000_000
EVAL_EPISODES = 20


def huber_like(abs_td: torch.Tensor) -> torch.Tensor:
    """cpprb's example loss: |δ| beyond 1, δ² within (its "Huber_loss")."""
    return torch.where(abs_td > 1.0, abs_td, abs_td.square())


def state_goal(state: np.ndarray, goal: np.ndarray) -> torch.Tensor:
    """The network's input: state and goal side by side, one row per transition."""
    state = np.asarray(state, dtype=np.float32).reshape(len(state), -1)
    goal = np.asarray(goal, dtype=np.float32).reshape(len(goal), -1)
    return torch.from_numpy(np.concatenate([state, goal], axis=1))


def q_of(model: nn.Module, inputs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    return model(inputs).gather(1, actions[:, None]).squeeze(1)


def double_dqn_target(model, target, next_inputs, rewards, dones) -> torch.Tensor:
    """Double DQN (van Hasselt et al. 2015): the online network picks, the target network values."""
    with torch.no_grad():
        best = model(next_inputs).argmax(dim=1, keepdim=True)
        return GAMMA * target(next_inputs).gather(1, best).squeeze(1) * (1.0 - dones) + rewards


def greedy(model: nn.Module, obs: dict) -> int:
    with torch.no_grad():
        return int(model(state_goal(obs["observation"][None], obs["desired_goal"][None])).argmax())


def evaluate(model: nn.Module, env: BitFlippingEnv) -> float:
    successes = 0
    for _ in range(EVAL_EPISODES):
        obs, _ = env.reset()
        terminated = truncated = False
        while not (terminated or truncated):
            obs, _, terminated, truncated, _ = env.step(greedy(model, obs))
        successes += terminated
    return successes / EVAL_EPISODES


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=N_ITERATION, help="environment steps (cpprb's N_iteration)")
    parser.add_argument("--no-prioritized", action="store_true", help="uniform instead of prioritized replay")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--use-cpprb", action="store_true", help="the same loop on cpprb's own buffer, for comparison")
    args = parser.parse_args(argv)
    prioritized = not args.no_prioritized
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)  # a 64-unit network: threads cost more than they bring
    rng = np.random.default_rng(args.seed)

    # episodes end on success or after MAX_EPISODE_LEN steps, as in cpprb's loop
    env = BitFlippingEnv(NBIT, random_goal=True, max_steps=MAX_EPISODE_LEN)
    eval_env = BitFlippingEnv(NBIT, random_goal=True, max_steps=MAX_EPISODE_LEN)
    env.action_space.seed(args.seed)
    eval_env.reset(seed=args.seed + 1)
    n_actions = env.action_space.n

    model = nn.Sequential(nn.Linear(2 * NBIT, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, n_actions))
    target_model = copy.deepcopy(model)
    optimizer = torch.optim.Adam(model.parameters())  # Keras' Adam defaults: lr 1e-3

    if args.use_cpprb:
        from cpprb import HindsightReplayBuffer as buffer_class

        buffer_seed = {}  # cpprb draws its goals from an unseeded generator
    else:
        buffer_class, buffer_seed = HindsightReplayBuffer, {"seed": args.seed}
    rb = buffer_class(
        BUFFER_SIZE,
        {"obs": {"shape": (NBIT,)}, "act": {"shape": 1, "dtype": np.ubyte}, "next_obs": {"shape": (NBIT,)}},
        max_episode_len=MAX_EPISODE_LEN,
        reward_func=lambda s, a, g: -1 * (s != g).any(axis=1),
        prioritized=prioritized,
        **buffer_seed,
    )
    beta, beta_step = 0.4, (1 - 0.4) / args.steps  # linear annealing of the importance-sampling exponent

    obs, _ = env.reset(seed=args.seed)
    successes: list[float] = []
    for n_step in range(args.steps):
        if rng.random() < EGREEDY:
            act = env.action_space.sample()
        else:
            act = greedy(model, obs)
        next_obs, _, terminated, truncated, _ = env.step(act)
        rb.add(obs=obs["observation"], act=act, next_obs=next_obs["observation"])
        if terminated or truncated:
            # the goal of the episode that just ended (cpprb's loop passes the next episode's by mistake)
            rb.on_episode_end(obs["desired_goal"])
            obs, _ = env.reset()
        else:
            obs = next_obs

        if rb.get_stored_size() < N_WARMUP:
            continue
        sample = rb.sample(BATCH_SIZE, beta=beta) if prioritized else rb.sample(BATCH_SIZE)
        if prioritized:
            beta += beta_step
        weights = torch.from_numpy(sample["weights"]) if prioritized else torch.tensor(1.0)
        actions = torch.from_numpy(sample["act"].ravel().astype(np.int64))
        rewards = torch.from_numpy(sample["rew"].ravel())
        dones = 1.0 + rewards  # reward 0 means the goal is reached
        inputs = state_goal(sample["obs"], sample["goal"])
        target_q = double_dqn_target(model, target_model, state_goal(sample["next_obs"], sample["goal"]), rewards, dones)
        loss = (huber_like((target_q - q_of(model, inputs, actions)).abs()) * weights).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if prioritized:  # new priorities from the updated network, as cpprb's example does
            with torch.no_grad():
                rb.update_priorities(sample["indexes"], (target_q - q_of(model, inputs, actions)).abs().numpy())

        if n_step % TARGET_UPDATE_FREQ == 0:
            target_model.load_state_dict(model.state_dict())
        if n_step % EVAL_FREQ == EVAL_FREQ - 1:
            successes.append(evaluate(model, eval_env))
            if len(successes) % 10 == 0:
                print(f"step {n_step + 1}: success rate {successes[-1]:.2f}", flush=True)

    final = float(np.mean(successes[-10:])) if successes else 0.0
    print(f"{'prioritized' if prioritized else 'uniform'} replay, {args.steps} steps: "
          f"success rate {final:.2f} (mean of the last {min(len(successes), 10)} evaluations)")
    return final


if __name__ == "__main__":
    main()
