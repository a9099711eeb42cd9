//! The memory store's order writes: add, update and remove, one organization's list
//! replaced whole (readers never wait), each recorded in the events feed and raising its
//! webhook events.

use super::*;
use crate::store::OrderChange;

impl MemoryStore {
    /// Adds one order to the organization `organization_id`.
    ///
    /// # Errors
    ///
    /// [`InvalidData`](crate::StoreErrorKind::InvalidData) if the organization is unknown, it
    /// has an order with that id, or the order cannot be served ([`EncodedOrder::new`]).
    pub fn add_order(&self, organization_id: &str, order: Order) -> Result<(), StoreError> {
        self.add_orders(organization_id, [order])
    }

    /// Removes the order `order_id` of the organization `organization_id`, and returns whether
    /// it was there.
    pub fn remove_order(&self, organization_id: &str, order_id: &str) -> bool {
        let _writer = self
            .order_writer
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let current = self.read().orders.get(organization_id).cloned();
        let Some(next) = current.and_then(|orders| orders.without(order_id)) else {
            return false;
        };
        self.write()
            .orders
            .insert(organization_id.to_owned(), Arc::new(next));
        let data = serde_json::to_vec(&serde_json::json!({ "id": order_id })).unwrap_or_default();
        self.record_changes(
            organization_id,
            [(OrderChange::Deleted, order_id.to_owned(), data.into())],
        );
        true
    }

    /// Adds orders to the organization `organization_id`, all or none.
    ///
    /// # Errors
    ///
    /// As [`add_order`](Self::add_order), for any of them; then none is added.
    pub fn add_orders(
        &self,
        organization_id: &str,
        orders: impl IntoIterator<Item = Order>,
    ) -> Result<(), StoreError> {
        let encoded = orders
            .into_iter()
            .map(EncodedOrder::new)
            .collect::<Result<Vec<_>, _>>()?;
        let _writer = self
            .order_writer
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let current = {
            let state = self.read();
            if !state.organizations.contains_key(organization_id) {
                return Err(unknown_organization(organization_id));
            }
            state
                .orders
                .get(organization_id)
                .cloned()
                .unwrap_or_default()
        };
        // Built outside the lock: readers go on with the current page meanwhile.
        let next = current.with(organization_id, &encoded)?;
        self.write()
            .orders
            .insert(organization_id.to_owned(), Arc::new(next));
        self.record_written(organization_id, OrderChange::Created, &encoded);
        Ok(())
    }

    /// Replaces the order of `organization_id` that has `order`'s id with `order`.
    ///
    /// # Errors
    ///
    /// [`NotFound`](crate::StoreErrorKind::NotFound) if the organization has no order with
    /// that id; [`InvalidData`](crate::StoreErrorKind::InvalidData) if the order cannot be
    /// served ([`EncodedOrder::new`]).
    pub fn update_order(&self, organization_id: &str, order: Order) -> Result<(), StoreError> {
        let encoded = EncodedOrder::new(order)?;
        let _writer = self
            .order_writer
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let current = self.read().orders.get(organization_id).cloned();
        let order_id = &encoded.order().id;
        let Some(current) = current else {
            return Err(StoreError::not_found(format!(
                "no order {order_id:?} in this organization"
            )));
        };
        let unchanged = current
            .get(order_id)
            .map(|held| held.json() == encoded.json());
        let Some(unchanged) = unchanged else {
            return Err(StoreError::not_found(format!(
                "no order {order_id:?} in this organization"
            )));
        };
        if unchanged {
            return Ok(());
        }
        let next = current
            .without(order_id)
            .unwrap_or_default()
            .with(organization_id, std::slice::from_ref(&encoded))?;
        self.write()
            .orders
            .insert(organization_id.to_owned(), Arc::new(next));
        self.record_written(
            organization_id,
            OrderChange::Updated,
            std::slice::from_ref(&encoded),
        );
        Ok(())
    }

    /// Records one change per written order (while the caller holds `order_writer`).
    fn record_written(&self, organization_id: &str, change: OrderChange, orders: &[EncodedOrder]) {
        self.record_changes(
            organization_id,
            orders.iter().map(|order| {
                (
                    change,
                    order.order().id.clone(),
                    bytes::Bytes::copy_from_slice(order.json()),
                )
            }),
        );
    }
}
