"""SAC + HER on FetchReach (gymnasium-robotics, ``pip install herl[robotics]``), with evaluation callbacks.

    python examples/sac_her_fetch_reach.py                 # up to 5k steps, stops at success >= 0.95
    python examples/sac_her_fetch_reach.py --steps 1000

An ``EvalCallback`` evaluates 20 episodes every 500 steps and logs ``eval/success_rate``; the
``StopTrainingOnSuccessThreshold`` it carries stops training once the success rate reaches 0.95.
"""

from __future__ import annotations

import argparse

import gymnasium as gym

from herl import SAC, EvalCallback, HerReplayBuffer, StopTrainingOnSuccessThreshold


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--env", default="FetchReach-v4")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.env.startswith("Fetch"):
        import gymnasium_robotics

        gym.register_envs(gymnasium_robotics)

    model = SAC("MultiInputPolicy", args.env, replay_buffer_class=HerReplayBuffer,
                replay_buffer_kwargs=dict(n_sampled_goal=4, goal_selection_strategy="future"),
                learning_rate=1e-3, batch_size=256, gamma=0.95, tau=0.05, learning_starts=100,
                policy_kwargs=dict(net_arch=[64, 64]), seed=args.seed)
    stop = StopTrainingOnSuccessThreshold(0.95, verbose=1)
    eval_callback = EvalCallback(gym.make(args.env), n_eval_episodes=20, eval_freq=500, callback_after_eval=stop)
    model.learn(args.steps, callback=eval_callback)
    print(f"{args.env}: success rate {eval_callback.last_success_rate:.2f} after {model.num_timesteps} steps")
    return eval_callback.last_success_rate


if __name__ == "__main__":
    main()
